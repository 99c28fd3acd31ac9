#include "breakpoint/trampoline.hpp"

#include "breakpoint/event_ring.hpp"
#include "breakpoint/relocate.hpp"
#include "breakpoint/x86_asm.hpp"

namespace probecost {

namespace {

using namespace x86;

constexpr std::int64_t kRedZone = 128;  // SysV ABI: below %rsp, a leaf function's to use
constexpr ZydisInstructionAttributes kLock = ZYDIS_ATTRIB_HAS_LOCK;

// Whether data at `target` is in RIP-relative reach of a whole trampoline at `at`: decided once
// per trampoline, so that which registers it saves and how it addresses agree.
bool near(RuntimeAddr at, RuntimeAddr target) {
  constexpr std::int64_t kTrampolineMax = 4096;
  return within_rel32(at, target, kTrampolineMax);
}

// The operand for the 8 bytes at `target`: RIP-relative if in reach, else through `scratch`
// loaded with the absolute address.
ZydisEncoderOperand reach(Assembler& a, RuntimeAddr target, ZydisRegister scratch, bool is_near) {
  if (is_near) return rip(target);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(scratch), imm(static_cast<std::int64_t>(target.value()))});
  return mem(scratch, 0);
}

// One record into the ring (see event_ring.hpp for the protocol). On entry nothing is live in
// rax, rcx, rdx, rsi; %rdi is the site's.
void emit_record(Assembler& a, RuntimeAddr start, const EventTarget& ev) {
  RuntimeAddr head = ev.ring + static_cast<std::int64_t>(offsetof(jump::RingHeader, head));
  RuntimeAddr slots = ev.ring + static_cast<std::int64_t>(sizeof(jump::RingHeader));
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ZYDIS_REGISTER_ECX), imm(1)});
  a.must(ZYDIS_MNEMONIC_XADD,
         {reach(a, head, ZYDIS_REGISTER_RSI, near(start, head)), reg(ZYDIS_REGISTER_RCX)}, kLock);
  a.must(ZYDIS_MNEMONIC_RDTSC, {});  // edx:eax; not ordered with the xadd, nor needs to be
  a.must(ZYDIS_MNEMONIC_SHL, {reg(ZYDIS_REGISTER_RDX), imm(32)});
  a.must(ZYDIS_MNEMONIC_OR, {reg(ZYDIS_REGISTER_RAX), reg(ZYDIS_REGISTER_RDX)});
  // rsi = slots + (position & (capacity - 1)) * 24
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ZYDIS_REGISTER_EDX), reg(ZYDIS_REGISTER_ECX)});
  a.must(ZYDIS_MNEMONIC_AND,
         {reg(ZYDIS_REGISTER_EDX), imm(static_cast<std::int64_t>(ev.capacity - 1))});
  a.must(ZYDIS_MNEMONIC_LEA,
         {reg(ZYDIS_REGISTER_RDX), mem(ZYDIS_REGISTER_RDX, 0, 8, ZYDIS_REGISTER_RDX, 2)});
  if (near(start, slots)) {
    a.must(ZYDIS_MNEMONIC_LEA, {reg(ZYDIS_REGISTER_RSI), rip(slots)});
  } else {
    a.must(ZYDIS_MNEMONIC_MOV,
           {reg(ZYDIS_REGISTER_RSI), imm(static_cast<std::int64_t>(slots.value()))});
  }
  a.must(ZYDIS_MNEMONIC_LEA,
         {reg(ZYDIS_REGISTER_RSI), mem(ZYDIS_REGISTER_RSI, 0, 8, ZYDIS_REGISTER_RDX, 8)});
  // seq = 0 first, the commit word last: x86 makes stores visible in program order.
  a.must(ZYDIS_MNEMONIC_MOV, {mem(ZYDIS_REGISTER_RSI, jump::kSeqOffset, 4), imm(0)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(ZYDIS_REGISTER_RSI, 0), reg(ZYDIS_REGISTER_RAX)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(ZYDIS_REGISTER_RSI, 8), reg(ZYDIS_REGISTER_RDI)});
  // {id, seq} in one store: seq = 2 * position + 1 (32 bits) in the high half.
  a.must(ZYDIS_MNEMONIC_LEA,
         {reg(ZYDIS_REGISTER_ECX), mem(ZYDIS_REGISTER_RCX, 1, 8, ZYDIS_REGISTER_RCX, 1)});
  a.must(ZYDIS_MNEMONIC_SHL, {reg(ZYDIS_REGISTER_RCX), imm(32)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ZYDIS_REGISTER_EDX), imm(ev.id)});
  a.must(ZYDIS_MNEMONIC_OR, {reg(ZYDIS_REGISTER_RCX), reg(ZYDIS_REGISTER_RDX)});
  a.must(ZYDIS_MNEMONIC_MOV,
         {mem(ZYDIS_REGISTER_RSI, jump::kCommitOffset), reg(ZYDIS_REGISTER_RCX)});
}

// The registers the body clobbers, in push order.
std::vector<ZydisRegister> clobbered(const TrampolineSpec& spec) {
  if (spec.events)
    return {ZYDIS_REGISTER_RAX, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RDX, ZYDIS_REGISTER_RSI};
  if (!near(spec.address, spec.hit_counter)) return {ZYDIS_REGISTER_RAX};
  return {};
}

void emit_body(Assembler& a, const JumpPlan& plan, const TrampolineSpec& spec) {
  auto saved = clobbered(spec);
  // A push writes below %rsp, which may be a leaf function's red zone in use: step over it with
  // lea, which unlike sub leaves the flags alone.
  bool pushes = !saved.empty() || plan.preserve_flags;
  if (pushes)
    a.must(ZYDIS_MNEMONIC_LEA, {reg(ZYDIS_REGISTER_RSP), mem(ZYDIS_REGISTER_RSP, -kRedZone)});
  // lock inc and lock xadd write the status flags. At a function entry none are live (ABI);
  // elsewhere the plan decides, and pushfq/popfq keep them.
  if (plan.preserve_flags) a.must(ZYDIS_MNEMONIC_PUSHFQ, {});
  for (auto r : saved) a.must(ZYDIS_MNEMONIC_PUSH, {reg(r)});
  a.must(ZYDIS_MNEMONIC_INC,
         {reach(a, spec.hit_counter, ZYDIS_REGISTER_RAX, near(spec.address, spec.hit_counter))},
         kLock);
  if (spec.events) emit_record(a, spec.address, *spec.events);
  for (auto r = saved.rbegin(); r != saved.rend(); ++r) a.must(ZYDIS_MNEMONIC_POP, {reg(*r)});
  if (plan.preserve_flags) a.must(ZYDIS_MNEMONIC_POPFQ, {});
  if (pushes)
    a.must(ZYDIS_MNEMONIC_LEA, {reg(ZYDIS_REGISTER_RSP), mem(ZYDIS_REGISTER_RSP, kRedZone)});
}

}  // namespace

std::optional<RuntimeAddr> Trampoline::moved_pc(RuntimeAddr pc) const {
  for (const auto& [original, copy] : copies) {
    if (original == pc) return copy;
  }
  return std::nullopt;
}

std::optional<Trampoline> build_trampoline(const JumpPlan& plan, const TrampolineSpec& spec,
                                           std::string& why) {
  Assembler a(spec.address);
  emit_body(a, plan, spec);
  auto block = relocate_block(plan.covered, a.here(), why);
  if (!block) return std::nullopt;
  a.raw(block->bytes);
  Trampoline t{spec.address, a.bytes(), {}};
  for (std::size_t i = 1; i < plan.covered.size(); ++i) {
    t.copies.emplace_back(plan.covered[i].address, block->at + block->offsets[i]);
  }
  return t;
}

}  // namespace probecost
