#pragma once
// A few lines of x86-64 assembled at a known runtime address, through Zydis' encoder: the
// trampolines and the relocated branches are written as instructions, not as hand-built bytes.
// Memory operands relative to RIP take the absolute address they mean; the encoder computes the
// displacement for where the instruction lands (ZydisEncoderEncodeInstructionAbsolute).
//
// Internal to the breakpoint library (it exposes Zydis types).
#include <Zydis/Zydis.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "common/address.hpp"

namespace probecost::x86 {

ZydisEncoderOperand reg(ZydisRegister r);
ZydisEncoderOperand imm(std::int64_t value);
// [base + index*scale + disp], `size` bytes wide (8 for lea, whose operand is only an address).
ZydisEncoderOperand mem(ZydisRegister base, std::int64_t disp, std::uint16_t size = 8,
                        ZydisRegister index = ZYDIS_REGISTER_NONE, std::uint8_t scale = 0);
// [rip + (at - next instruction)]: the byte at absolute address `at`.
ZydisEncoderOperand rip(RuntimeAddr at, std::uint16_t size = 8);

// True when `target` is reachable by a rel32 or disp32 from an instruction ending at `from`,
// give or take `margin` bytes (an instruction's own length, or the size of code yet to come).
bool within_rel32(RuntimeAddr from, RuntimeAddr target, std::int64_t margin = 16);

class Assembler {
 public:
  explicit Assembler(RuntimeAddr at) : start_(at) {}

  RuntimeAddr here() const { return start_ + static_cast<std::int64_t>(bytes_.size()); }
  std::size_t size() const { return bytes_.size(); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

  // Appends one instruction. False if Zydis cannot encode it here (a relative operand out of
  // reach); nothing is appended then.
  bool emit(ZydisMnemonic m, std::initializer_list<ZydisEncoderOperand> operands,
            ZydisInstructionAttributes prefixes = 0);
  // As emit(), for an instruction that cannot fail: a failure is a bug in the caller (Error).
  void must(ZydisMnemonic m, std::initializer_list<ZydisEncoderOperand> operands,
            ZydisInstructionAttributes prefixes = 0);
  // jmp/jcc rel32 to an absolute target (rel32 even when rel8 would reach, so that lengths are
  // known in advance). False when the target is out of reach.
  bool branch32(ZydisMnemonic m, RuntimeAddr target);
  // jmp rel32 when in reach, else jmp *0(%rip) followed by the 8-byte target: 5 or 14 bytes.
  void jump(RuntimeAddr target);
  void raw(std::span<const std::uint8_t> bytes);

 private:
  bool encode(ZydisEncoderRequest& request);
  RuntimeAddr start_;
  std::vector<std::uint8_t> bytes_;
};

}  // namespace probecost::x86
