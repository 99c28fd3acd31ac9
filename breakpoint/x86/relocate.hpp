#pragma once
// Running instructions from a copy at another address: the core that the out-of-line step-over
// (one instruction) and the jump-patched probe's trampoline (the few instructions its jump
// displaces) share.
//
// What changes in the copy:
// - a RIP-relative memory operand gets its displacement re-biased, so it still means the same
//   byte (refused beyond +-2 GiB);
// - jmp and jcc, rel8 or rel32, become rel32 for the new place; one whose target is another
//   instruction of the block goes to that instruction's copy;
// - a jump to the instruction after the block is appended.
// What cannot run from a copy is refused: call, direct or not (it would push an address inside
// the copy),
// loop/loopcc/jrcxz (no rel32 form) and xbegin (its abort address is RIP-relative).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/x86/decoder.hpp"

namespace probecost {

struct RelocatedBlock {
  RuntimeAddr at;
  std::vector<std::uint8_t> bytes;
  // Where the copy of each instruction of the block starts, as an offset into `bytes`.
  std::vector<std::uint32_t> offsets;
  // Where the jump back to the instruction after the block starts, when it has one.
  std::optional<std::uint32_t> jump_back;
};

// Why `in` cannot run from a copy wherever the copy is; empty if it can.
std::string why_not_relocatable(const Instruction& in);

// `block`: consecutive instructions. Nothing, with `why` set, when one cannot run from `at`.
// Without `jump_back`, the copy ends with the last instruction's: the caller appends what runs
// next (an exit trampoline's record and its own copy of the ret).
std::optional<RelocatedBlock> relocate_block(std::span<const Instruction> block, RuntimeAddr at,
                                             std::string& why, bool jump_back = true);

}  // namespace probecost
