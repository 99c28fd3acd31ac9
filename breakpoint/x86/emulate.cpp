#include "breakpoint/x86/emulate.hpp"

#include "common/error.hpp"

namespace probecost {

namespace {

constexpr unsigned long long CF = 1u << 0, PF = 1u << 2, AF = 1u << 4, ZF = 1u << 6, SF = 1u << 7,
                             OF = 1u << 11;

unsigned long long& reg(user_regs_struct& r, Gpr g) {
  switch (g) {
    case Gpr::Rax:
      return r.rax;
    case Gpr::Rbx:
      return r.rbx;
    case Gpr::Rcx:
      return r.rcx;
    case Gpr::Rdx:
      return r.rdx;
    case Gpr::Rsi:
      return r.rsi;
    case Gpr::Rdi:
      return r.rdi;
    case Gpr::Rbp:
      return r.rbp;
    case Gpr::Rsp:
      return r.rsp;
    case Gpr::R8:
      return r.r8;
    case Gpr::R9:
      return r.r9;
    case Gpr::R10:
      return r.r10;
    case Gpr::R11:
      return r.r11;
    case Gpr::R12:
      return r.r12;
    case Gpr::R13:
      return r.r13;
    case Gpr::R14:
      return r.r14;
    case Gpr::R15:
      return r.r15;
    case Gpr::None:
      break;
  }
  static unsigned long long none;
  none = 0;
  return none;
}

void push64(user_regs_struct& r, TraceeMemory& mem, std::uint64_t value) {
  r.rsp -= 8;
  mem.write(RuntimeAddr(r.rsp), {reinterpret_cast<const std::uint8_t*>(&value), 8});
}

std::uint64_t pop64(user_regs_struct& r, TraceeMemory& mem) {
  std::uint64_t value = 0;
  mem.read(RuntimeAddr(r.rsp), {reinterpret_cast<std::uint8_t*>(&value), 8});
  r.rsp += 8;
  return value;
}

// The address of `in`'s memory operand (base + index * scale + disp, or RIP-relative).
std::uint64_t effective_address(const Instruction& in, user_regs_struct& r) {
  std::uint64_t addr =
      in.rip_relative ? in.next().value() : (in.base == Gpr::None ? 0 : reg(r, in.base));
  if (in.index != Gpr::None) addr += reg(r, in.index) * in.scale;
  return addr + static_cast<std::uint64_t>(in.disp);
}

}  // namespace

std::optional<RuntimeAddr> jump_target(const Instruction& in, user_regs_struct regs,
                                       TraceeMemory& memory) {
  if (in.flow != Instruction::Flow::IndirectJump || !in.target_operand) return std::nullopt;
  if (in.src != Gpr::None) return RuntimeAddr(reg(regs, in.src));
  std::uint64_t target = 0;
  try {
    memory.read(RuntimeAddr(effective_address(in, regs)),
                {reinterpret_cast<std::uint8_t*>(&target), sizeof target});
  } catch (const Error&) {
    return std::nullopt;  // the jump faults: it goes nowhere
  }
  return RuntimeAddr(target);
}

std::string why_not_emulable(const Instruction& in) {
  if (in.kind == Instruction::Kind::Other) return in.quoted() + " is not one the emulator knows";
  return {};
}

unsigned long long flags_after_addsub(unsigned long long flags, std::uint64_t a, std::uint64_t b,
                                      bool subtract) {
  std::uint64_t res = subtract ? a - b : a + b;
  flags &= ~(CF | PF | AF | ZF | SF | OF);
  if (subtract ? a < b : res < a) flags |= CF;
  if (!__builtin_parity(static_cast<unsigned>(res & 0xff))) flags |= PF;  // even ones: PF=1
  if ((a ^ b ^ res) & 0x10) flags |= AF;
  if (res == 0) flags |= ZF;
  if (res >> 63) flags |= SF;
  std::uint64_t overflow = subtract ? ((a ^ b) & (a ^ res)) : (~(a ^ b) & (a ^ res));
  if (overflow >> 63) flags |= OF;
  return flags;
}

bool condition_holds(std::uint8_t cc, unsigned long long f) {
  bool cf = f & CF, pf = f & PF, zf = f & ZF, sf = f & SF, of = f & OF;
  bool result = false;
  switch (cc >> 1) {
    case 0:
      result = of;
      break;  // O
    case 1:
      result = cf;
      break;  // B
    case 2:
      result = zf;
      break;  // Z
    case 3:
      result = cf || zf;
      break;  // BE
    case 4:
      result = sf;
      break;  // S
    case 5:
      result = pf;
      break;  // P
    case 6:
      result = sf != of;
      break;  // L
    case 7:
      result = zf || (sf != of);
      break;  // LE
  }
  return (cc & 1) ? !result : result;  // odd condition codes are the negations
}

bool emulate(const Instruction& in, user_regs_struct& r, TraceeMemory& mem) {
  using K = Instruction::Kind;
  std::uint64_t next = in.next().value();
  switch (in.kind) {
    case K::Nop:
      r.rip = next;
      return true;
    case K::JmpRel:
      r.rip = in.target.value();
      return true;
    case K::Jcc:
      r.rip = condition_holds(in.condition, r.eflags) ? in.target.value() : next;
      return true;
    case K::Push: {
      std::uint64_t value = reg(r, in.src);  // push %rsp pushes the value before the push
      push64(r, mem, value);
      break;
    }
    case K::Pop: {
      std::uint64_t value = pop64(r, mem);
      reg(r, in.dst) = value;  // after the increment: pop %rsp loads the popped value
      break;
    }
    case K::MovRegReg:
      reg(r, in.dst) = in.operand32 ? (reg(r, in.src) & 0xffffffffu) : reg(r, in.src);
      break;
    case K::AddSubImm: {
      std::uint64_t a = reg(r, in.dst), b = static_cast<std::uint64_t>(in.imm);
      r.eflags = flags_after_addsub(r.eflags, a, b, in.subtract);
      reg(r, in.dst) = in.subtract ? a - b : a + b;
      break;
    }
    case K::Lea: {
      std::uint64_t addr = effective_address(in, r);
      reg(r, in.dst) = in.operand32 ? (addr & 0xffffffffu) : addr;
      break;
    }
    case K::CallRel:
      push64(r, mem, next);
      r.rip = in.target.value();
      return false;
    case K::Ret:
      r.rip = pop64(r, mem);
      r.rsp += static_cast<std::uint64_t>(in.imm);
      return false;
    case K::Other:
      return false;  // not reached: why_not_emulable() said no
  }
  r.rip = next;
  return false;
}

}  // namespace probecost
