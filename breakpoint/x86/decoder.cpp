#include "breakpoint/x86/decoder.hpp"

#include <Zydis/Zydis.h>

#include <algorithm>

namespace probecost {

namespace {

Gpr gpr_of(ZydisRegister r, bool& is32) {
  static constexpr ZydisRegister k64[] = {
      ZYDIS_REGISTER_RAX, ZYDIS_REGISTER_RBX, ZYDIS_REGISTER_RCX, ZYDIS_REGISTER_RDX,
      ZYDIS_REGISTER_RSI, ZYDIS_REGISTER_RDI, ZYDIS_REGISTER_RBP, ZYDIS_REGISTER_RSP,
      ZYDIS_REGISTER_R8,  ZYDIS_REGISTER_R9,  ZYDIS_REGISTER_R10, ZYDIS_REGISTER_R11,
      ZYDIS_REGISTER_R12, ZYDIS_REGISTER_R13, ZYDIS_REGISTER_R14, ZYDIS_REGISTER_R15};
  static constexpr ZydisRegister k32[] = {
      ZYDIS_REGISTER_EAX,  ZYDIS_REGISTER_EBX,  ZYDIS_REGISTER_ECX,  ZYDIS_REGISTER_EDX,
      ZYDIS_REGISTER_ESI,  ZYDIS_REGISTER_EDI,  ZYDIS_REGISTER_EBP,  ZYDIS_REGISTER_ESP,
      ZYDIS_REGISTER_R8D,  ZYDIS_REGISTER_R9D,  ZYDIS_REGISTER_R10D, ZYDIS_REGISTER_R11D,
      ZYDIS_REGISTER_R12D, ZYDIS_REGISTER_R13D, ZYDIS_REGISTER_R14D, ZYDIS_REGISTER_R15D};
  for (int i = 0; i < 16; ++i) {
    if (k64[i] == r) {
      is32 = false;
      return static_cast<Gpr>(i);
    }
    if (k32[i] == r) {
      is32 = true;
      return static_cast<Gpr>(i);
    }
  }
  return Gpr::None;
}

Gpr gpr64(ZydisRegister r) {
  bool is32 = false;
  Gpr g = gpr_of(r, is32);
  return is32 ? Gpr::None : g;
}

// Condition nibble of a Jcc, as in the 0x70+cc / 0x0F 0x80+cc encodings.
int condition_of(ZydisMnemonic m) {
  switch (m) {
    case ZYDIS_MNEMONIC_JO:
      return 0x0;
    case ZYDIS_MNEMONIC_JNO:
      return 0x1;
    case ZYDIS_MNEMONIC_JB:
      return 0x2;
    case ZYDIS_MNEMONIC_JNB:
      return 0x3;
    case ZYDIS_MNEMONIC_JZ:
      return 0x4;
    case ZYDIS_MNEMONIC_JNZ:
      return 0x5;
    case ZYDIS_MNEMONIC_JBE:
      return 0x6;
    case ZYDIS_MNEMONIC_JNBE:
      return 0x7;
    case ZYDIS_MNEMONIC_JS:
      return 0x8;
    case ZYDIS_MNEMONIC_JNS:
      return 0x9;
    case ZYDIS_MNEMONIC_JP:
      return 0xa;
    case ZYDIS_MNEMONIC_JNP:
      return 0xb;
    case ZYDIS_MNEMONIC_JL:
      return 0xc;
    case ZYDIS_MNEMONIC_JNL:
      return 0xd;
    case ZYDIS_MNEMONIC_JLE:
      return 0xe;
    case ZYDIS_MNEMONIC_JNLE:
      return 0xf;
    default:
      return -1;
  }
}

// A memory operand's base, index, scale and displacement into `in`; false when it has a
// segment override (%fs, %gs) or a 32-bit address size, which neither lea's emulation nor an
// indirect jump's target reading handles.
bool memory_operand(const ZydisDecodedOperand& op, Instruction& in) {
  if (op.mem.segment == ZYDIS_REGISTER_FS || op.mem.segment == ZYDIS_REGISTER_GS) return false;
  in.rip_relative = op.mem.base == ZYDIS_REGISTER_RIP;
  in.base = in.rip_relative ? Gpr::None : gpr64(op.mem.base);
  in.index = gpr64(op.mem.index);
  if ((op.mem.base != ZYDIS_REGISTER_NONE && !in.rip_relative && in.base == Gpr::None) ||
      (op.mem.index != ZYDIS_REGISTER_NONE && in.index == Gpr::None))
    return false;
  in.scale = op.mem.scale;
  in.disp = op.mem.disp.has_displacement ? op.mem.disp.value : 0;
  return true;
}

void classify(const ZydisDecodedInstruction& zi, const ZydisDecodedOperand* ops, Instruction& in) {
  using K = Instruction::Kind;
  const auto& op0 = ops[0];
  const auto& op1 = ops[1];
  bool is32 = false;
  switch (zi.mnemonic) {
    case ZYDIS_MNEMONIC_NOP:
    case ZYDIS_MNEMONIC_ENDBR64:
      in.kind = K::Nop;
      return;
    case ZYDIS_MNEMONIC_PUSH:
      if (op0.type == ZYDIS_OPERAND_TYPE_REGISTER && (in.src = gpr64(op0.reg.value)) != Gpr::None)
        in.kind = K::Push;
      return;
    case ZYDIS_MNEMONIC_POP:
      if (op0.type == ZYDIS_OPERAND_TYPE_REGISTER && (in.dst = gpr64(op0.reg.value)) != Gpr::None)
        in.kind = K::Pop;
      return;
    case ZYDIS_MNEMONIC_MOV:
      if (op0.type == ZYDIS_OPERAND_TYPE_REGISTER && op1.type == ZYDIS_OPERAND_TYPE_REGISTER) {
        bool is32b = false;
        in.dst = gpr_of(op0.reg.value, is32);
        in.src = gpr_of(op1.reg.value, is32b);
        if (in.dst != Gpr::None && in.src != Gpr::None && is32 == is32b) {
          in.operand32 = is32;
          in.kind = K::MovRegReg;
        }
      }
      return;
    case ZYDIS_MNEMONIC_ADD:
    case ZYDIS_MNEMONIC_SUB:
      if (op0.type == ZYDIS_OPERAND_TYPE_REGISTER && op1.type == ZYDIS_OPERAND_TYPE_IMMEDIATE &&
          (in.dst = gpr64(op0.reg.value)) != Gpr::None) {
        in.subtract = zi.mnemonic == ZYDIS_MNEMONIC_SUB;
        in.imm = op1.imm.value.s;
        in.kind = K::AddSubImm;
      }
      return;
    case ZYDIS_MNEMONIC_LEA:
      in.dst = gpr_of(op0.reg.value, is32);
      if (in.dst == Gpr::None || !memory_operand(op1, in)) return;
      in.operand32 = is32;
      in.kind = K::Lea;
      return;
    case ZYDIS_MNEMONIC_JMP:
      if (in.relative_branch) {
        in.kind = K::JmpRel;
      } else if (op0.type == ZYDIS_OPERAND_TYPE_REGISTER) {
        in.src = gpr64(op0.reg.value);
        in.target_operand = in.src != Gpr::None;
      } else if (op0.type == ZYDIS_OPERAND_TYPE_MEMORY && op0.size == 64) {
        in.target_operand = memory_operand(op0, in);
      }
      return;
    case ZYDIS_MNEMONIC_CALL:
      if (in.relative_branch) in.kind = K::CallRel;
      return;
    case ZYDIS_MNEMONIC_RET:
      in.imm =
          op0.type == ZYDIS_OPERAND_TYPE_IMMEDIATE ? static_cast<std::int64_t>(op0.imm.value.u) : 0;
      in.kind = K::Ret;
      return;
    default: {
      int cc = condition_of(zi.mnemonic);
      if (cc >= 0 && in.relative_branch) {
        in.condition = static_cast<std::uint8_t>(cc);
        in.kind = K::Jcc;
      }
    }
  }
}

bool is_far(const ZydisDecodedInstruction& zi) {
  return zi.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR;
}

// Zydis' category says which instructions leave the straight line; the mnemonic and the operand
// tell the kinds apart that a relocator treats differently.
Instruction::Flow flow_of(const ZydisDecodedInstruction& zi, const ZydisDecodedOperand& op0) {
  using F = Instruction::Flow;
  const bool relative = op0.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op0.imm.is_relative;
  switch (zi.mnemonic) {
    case ZYDIS_MNEMONIC_LOOP:
    case ZYDIS_MNEMONIC_LOOPE:
    case ZYDIS_MNEMONIC_LOOPNE:
    case ZYDIS_MNEMONIC_JCXZ:
    case ZYDIS_MNEMONIC_JECXZ:
    case ZYDIS_MNEMONIC_JRCXZ:
      return F::RelShortOnly;
    case ZYDIS_MNEMONIC_XBEGIN:
      return F::Transaction;
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ:
      return F::Return;
    default:
      break;
  }
  switch (zi.meta.category) {
    case ZYDIS_CATEGORY_UNCOND_BR:
      return is_far(zi) ? F::FarBranch : relative ? F::RelJump : F::IndirectJump;
    case ZYDIS_CATEGORY_COND_BR:
      return F::RelCondJump;
    case ZYDIS_CATEGORY_CALL:
      return is_far(zi) ? F::FarBranch : relative ? F::RelCall : F::IndirectCall;
    case ZYDIS_CATEGORY_RET:
      return is_far(zi) ? F::FarBranch : F::Return;
    case ZYDIS_CATEGORY_SYSCALL:
    case ZYDIS_CATEGORY_SYSRET:
      return F::SystemCall;
    case ZYDIS_CATEGORY_INTERRUPT:
      return F::Interrupt;
    default:
      return F::Sequential;
  }
}

void note_flags(const ZydisDecodedInstruction& zi, Instruction& in) {
  if (!zi.cpu_flags) return;
  const auto& f = *zi.cpu_flags;
  in.status_flags_read = f.tested & kStatusFlags;
  in.status_flags_written = (f.modified | f.set_0 | f.set_1 | f.undefined) & kStatusFlags;
}

}  // namespace

namespace {

const ZydisDecoder& decoder64() {
  static const ZydisDecoder decoder = [] {
    ZydisDecoder d;
    ZydisDecoderInit(&d, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    return d;
  }();
  return decoder;
}

}  // namespace

std::string Instruction::text() const {
  ZydisDecodedInstruction zi;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder64(), bytes.data(), length, &zi, ops)))
    return {};
  static const ZydisFormatter formatter = [] {
    ZydisFormatter f;
    ZydisFormatterInit(&f, ZYDIS_FORMATTER_STYLE_ATT);
    return f;
  }();
  char out[96];
  if (!ZYAN_SUCCESS(ZydisFormatterFormatInstruction(&formatter, &zi, ops, zi.operand_count_visible,
                                                    out, sizeof out, address.value(), nullptr)))
    return {};
  return out;
}

std::string Instruction::quoted() const {
  std::string out = "'";
  out += text();
  out += '\'';
  return out;
}

std::optional<Instruction> decode(std::span<const std::uint8_t> bytes, RuntimeAddr at) {
  ZydisDecodedInstruction zi;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder64(), bytes.data(), bytes.size(), &zi, ops))) {
    return std::nullopt;
  }
  Instruction in;
  in.address = at;
  in.length = zi.length;
  std::copy_n(bytes.begin(), zi.length, in.bytes.begin());
  for (int i = 0; i < zi.operand_count; ++i) {
    if (ops[i].type != ZYDIS_OPERAND_TYPE_MEMORY) continue;
    if (ops[i].mem.base == ZYDIS_REGISTER_RIP) in.rip_relative = true;
    if (ops[i].mem.segment == ZYDIS_REGISTER_FS || ops[i].mem.segment == ZYDIS_REGISTER_GS)
      in.uses_segment_fs_gs = true;
  }
  in.rep = (zi.attributes &
            (ZYDIS_ATTRIB_HAS_REP | ZYDIS_ATTRIB_HAS_REPE | ZYDIS_ATTRIB_HAS_REPNE)) != 0;
  if (in.rip_relative) {
    in.disp_offset = zi.raw.disp.offset;
    in.disp_size = zi.raw.disp.size / 8;
  }
  for (const auto& imm : zi.raw.imm) {
    if (imm.is_relative) {
      in.relative_branch = true;
      in.imm_offset = imm.offset;
      in.imm_size = imm.size / 8;
      in.target = in.next() + imm.value.s;
    }
  }
  classify(zi, ops, in);
  in.flow = flow_of(zi, ops[0]);
  in.mnemonic = zi.mnemonic;
  note_flags(zi, in);
  return in;
}

}  // namespace probecost
