#include "breakpoint/x86/x86_asm.hpp"

#include <cstring>
#include <limits>

#include "common/error.hpp"

namespace probecost::x86 {

ZydisEncoderOperand reg(ZydisRegister r) {
  ZydisEncoderOperand op{};
  op.type = ZYDIS_OPERAND_TYPE_REGISTER;
  op.reg.value = r;
  return op;
}

ZydisEncoderOperand imm(std::int64_t value) {
  ZydisEncoderOperand op{};
  op.type = ZYDIS_OPERAND_TYPE_IMMEDIATE;
  op.imm.s = value;
  return op;
}

ZydisEncoderOperand mem(ZydisRegister base, std::int64_t disp, std::uint16_t size,
                        ZydisRegister index, std::uint8_t scale) {
  ZydisEncoderOperand op{};
  op.type = ZYDIS_OPERAND_TYPE_MEMORY;
  op.mem.base = base;
  op.mem.index = index;
  op.mem.scale = scale;
  op.mem.displacement = disp;
  op.mem.size = size;
  return op;
}

ZydisEncoderOperand rip(RuntimeAddr at, std::uint16_t size) {
  return mem(ZYDIS_REGISTER_RIP, static_cast<std::int64_t>(at.value()), size);
}

bool within_rel32(RuntimeAddr from, RuntimeAddr target, std::int64_t margin) {
  std::int64_t d = target - from;
  return d > std::numeric_limits<std::int32_t>::min() + margin &&
         d < std::numeric_limits<std::int32_t>::max() - margin;
}

bool Assembler::encode(ZydisEncoderRequest& request) {
  std::uint8_t buf[ZYDIS_MAX_INSTRUCTION_LENGTH];
  ZyanUSize length = sizeof buf;
  if (!ZYAN_SUCCESS(ZydisEncoderEncodeInstructionAbsolute(&request, buf, &length, here().value())))
    return false;
  bytes_.insert(bytes_.end(), buf, buf + length);
  return true;
}

bool Assembler::emit(ZydisMnemonic m, std::initializer_list<ZydisEncoderOperand> operands,
                     ZydisInstructionAttributes prefixes) {
  ZydisEncoderRequest request{};
  request.machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
  request.mnemonic = m;
  request.prefixes = prefixes;
  request.operand_count = static_cast<ZyanU8>(operands.size());
  std::copy(operands.begin(), operands.end(), request.operands);
  return encode(request);
}

void Assembler::must(ZydisMnemonic m, std::initializer_list<ZydisEncoderOperand> operands,
                     ZydisInstructionAttributes prefixes) {
  if (!emit(m, operands, prefixes)) {
    throw Error(std::string("cannot encode ") + ZydisMnemonicGetString(m) + " at " + here().hex());
  }
}

bool Assembler::branch32(ZydisMnemonic m, RuntimeAddr target) {
  if (!within_rel32(here(), target)) return false;
  ZydisEncoderRequest request{};
  request.machine_mode = ZYDIS_MACHINE_MODE_LONG_64;
  request.mnemonic = m;
  request.branch_type = ZYDIS_BRANCH_TYPE_NEAR;
  request.branch_width = ZYDIS_BRANCH_WIDTH_32;
  request.operand_count = 1;
  request.operands[0] = imm(static_cast<std::int64_t>(target.value()));
  return encode(request);
}

void Assembler::jump(RuntimeAddr target) {
  if (branch32(ZYDIS_MNEMONIC_JMP, target)) return;
  // jmp *0(%rip): the 8 bytes right after this 6-byte instruction hold the target.
  must(ZYDIS_MNEMONIC_JMP, {rip(here() + 6)});
  std::uint64_t t = target.value();
  raw({reinterpret_cast<const std::uint8_t*>(&t), sizeof t});
}

void Assembler::raw(std::span<const std::uint8_t> bytes) {
  bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
}

}  // namespace probecost::x86
