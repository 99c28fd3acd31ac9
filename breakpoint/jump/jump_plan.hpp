#pragma once
// Planning a jump-patched probe: where a 5-byte `jmp rel32` to a trampoline may replace the code
// at a site, and which instructions it displaces.
//
// The jump overwrites whole instructions starting at the site, 5 bytes or more of them; they run
// relocated in the trampoline. That is safe only if no thread can ever arrive at a byte of the
// patched range other than its first. A thread arrives somewhere by falling through, by a branch,
// or by returning from a call; so, as Linux optprobes' can_optimize() and Orbit do, the planner
// decodes the whole containing function and refuses:
// - a direct branch anywhere in the function to a byte of the range after its first (except one
//   from inside the range to an instruction of the range: its copy is retargeted);
// - an indirect jump anywhere in the function (a jump table could target the range, and its
//   targets are not known; optprobes' insn_is_indirect_jump());
// - in the range: a call (its return address would be inside the range, or inside the copy),
//   syscall/sysenter, int/int3/into, ret/iret, far branches, loop/jrcxz, xbegin;
// - a range that runs past the function's end, or longer than kMaxPatchLength.
// Branches from other functions into the middle of this one are beyond any such analysis, as for
// optprobes; so are exception landing pads, which are entered by the unwinder.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/x86/decoder.hpp"

namespace probecost {

inline constexpr std::size_t kJumpLength = 5;       // e9 rel32
inline constexpr std::size_t kMaxPatchLength = 16;  // original bytes kept per site

// What a patch's trampoline wraps: the first instructions at a site (a probe, a function's entry),
// a function's exit (the instructions before a ret or tail jump, then that exit itself: the last
// one covered), or a function short enough to patch whole, from its entry to an exit.
enum class PlanRole { Entry, Exit, Call };

struct JumpPlan {
  PlanRole role = PlanRole::Entry;
  RuntimeAddr function;              // where the containing function starts
  RuntimeAddr site;                  // the first patched byte
  std::vector<Instruction> covered;  // the whole instructions the jump replaces
  std::size_t length = 0;            // their bytes: kJumpLength .. kMaxPatchLength
  std::array<std::uint8_t, kMaxPatchLength> original{};

  RuntimeAddr end() const { return site + static_cast<std::int64_t>(length); }
  std::span<const std::uint8_t> original_bytes() const { return {original.data(), length}; }
};

// Every instruction of the function at `function` whose bytes are `code`, decoded linearly from
// its start: compilers put no data inside x86-64 functions (jump tables live in .rodata), so
// every byte belongs to one instruction. Nothing, with `why`, when a byte does not decode.
std::optional<std::vector<Instruction>> decode_function(RuntimeAddr function,
                                                        std::span<const std::uint8_t> code,
                                                        std::string& why);

// Why no byte of the function may be patched because of its indirect jumps (one through a
// register or memory may go through a jump table, to targets nobody can list); empty if none.
std::string why_indirect_jump(const std::vector<Instruction>& function);

// Why `plan` cannot become bytes (a patch and a trampoline): its length outside kJumpLength ..
// kMaxPatchLength, or its instructions not exactly [site, site + length), whole and in order.
// Empty if it can. The planners make no other plans; this is checked where a plan becomes bytes,
// so that a planner's mistake is an error rather than a write past the patch.
std::string why_malformed(const JumpPlan& plan);

// `code`: the bytes of the whole function that starts at `function` (its ELF symbol's start and
// size: the caller reads them). Nothing, with a human reason in `why`, when the site must be
// refused.
std::optional<JumpPlan> plan_jump(RuntimeAddr function, std::span<const std::uint8_t> code,
                                  RuntimeAddr site, std::string& why);

}  // namespace probecost
