#include "breakpoint/x86/relocate.hpp"

#include <cstring>

#include "breakpoint/x86/x86_asm.hpp"

namespace probecost {

using Flow = Instruction::Flow;

std::string why_not_relocatable(const Instruction& in) {
  switch (in.flow) {
    case Flow::RelCall:
    case Flow::IndirectCall:
      // The callee would return into the copy, and an unwinder (a C++ exception, a profiler)
      // would meet a return address it has no unwind information for.
      return in.quoted() + ": a call pushes its own address, which would point into the copy";
    case Flow::RelShortOnly:
      return in.quoted() + " has a relative target with no 32-bit form (loop/jrcxz)";
    case Flow::Transaction:
      return in.quoted() + ": the abort address of xbegin is relative to RIP";
    default:
      if (in.rip_relative && in.disp_size != 4)
        return in.quoted() + ": RIP-relative operand without a 32-bit displacement";
      return {};
  }
}

namespace {

bool is_branch(const Instruction& in) {
  return in.flow == Flow::RelJump || in.flow == Flow::RelCondJump;
}

// Offsets of the copies: a branch becomes its rel32 form (jmp 5 bytes, jcc 6), anything else
// keeps its length.
std::vector<std::uint32_t> copy_offsets(std::span<const Instruction> block) {
  std::vector<std::uint32_t> offsets;
  std::uint32_t at = 0;
  for (const auto& in : block) {
    offsets.push_back(at);
    at += !is_branch(in) ? in.length : in.flow == Flow::RelJump ? 5 : 6;
  }
  return offsets;
}

// A branch target inside the block (after its first byte) is redirected to the copy of the
// instruction there; a target at the block's first byte stays: it re-enters the probe site.
std::optional<RuntimeAddr> branch_target(const Instruction& in, std::span<const Instruction> block,
                                         const std::vector<std::uint32_t>& offsets, RuntimeAddr at,
                                         std::string& why) {
  RuntimeAddr begin = block.front().address, end = block.back().next();
  if (in.target <= begin || in.target >= end) return in.target;
  for (std::size_t i = 0; i < block.size(); ++i) {
    if (block[i].address == in.target) return at + offsets[i];
  }
  why = in.quoted() + " jumps into the middle of an instruction it is relocated with";
  return std::nullopt;
}

// The instruction's own bytes with its RIP-relative displacement re-biased: disp' = disp +
// (old next) - (new next), so the operand keeps meaning the same byte. Patching the disp32 field
// Zydis located keeps every prefix and encoding exactly; re-encoding an arbitrary instruction
// (SSE, AVX, redundant prefixes) does not always round-trip byte for byte.
bool copy_rebiased(const Instruction& in, x86::Assembler& out, std::string& why) {
  std::vector<std::uint8_t> bytes(in.bytes.begin(), in.bytes.begin() + in.length);
  if (in.rip_relative) {
    RuntimeAddr new_next = out.here() + in.length;
    std::int32_t disp;
    std::memcpy(&disp, bytes.data() + in.disp_offset, 4);
    RuntimeAddr operand = in.next() + disp;
    if (!x86::within_rel32(new_next, operand)) {
      why = in.quoted() + ": its RIP-relative operand " + operand.hex() +
            " is out of reach of the copy at " + out.here().hex() + " (more than 2 GiB away)";
      return false;
    }
    disp = static_cast<std::int32_t>(operand - new_next);
    std::memcpy(bytes.data() + in.disp_offset, &disp, 4);
  }
  out.raw(bytes);
  return true;
}

}  // namespace

std::optional<RelocatedBlock> relocate_block(std::span<const Instruction> block, RuntimeAddr at,
                                             std::string& why, bool jump_back) {
  if (block.empty()) return RelocatedBlock{at, {}, {}, {}};
  for (const auto& in : block) {
    if (why = why_not_relocatable(in); !why.empty()) return std::nullopt;
  }
  auto offsets = copy_offsets(block);
  x86::Assembler out(at);
  for (const auto& in : block) {
    if (!is_branch(in)) {
      if (!copy_rebiased(in, out, why)) return std::nullopt;
      continue;
    }
    auto target = branch_target(in, block, offsets, at, why);
    if (!target) return std::nullopt;
    if (!out.branch32(static_cast<ZydisMnemonic>(in.mnemonic), *target)) {
      why = in.quoted() + ": branch target " + target->hex() + " out of reach of the copy at " +
            out.here().hex();
      return std::nullopt;
    }
  }
  std::optional<std::uint32_t> back;
  if (jump_back) {
    back = static_cast<std::uint32_t>(out.here() - at);
    out.jump(block.back().next());
  }
  return RelocatedBlock{at, out.bytes(), std::move(offsets), back};
}

}  // namespace probecost
