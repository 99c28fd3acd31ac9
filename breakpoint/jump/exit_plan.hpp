#pragma once
// Planning call probes: a function's entry and every way out of it, each
// under a patch of its own, so that no return address is ever replaced (uretprobes and uftrace
// replace it, and an unwinder, a C++ exception's included, then meets an address it has no
// unwind information for).
//
// The exits: `ret` (and `ret imm16`); a `jmp` out of the function, or back to its own entry (a
// tail call), also through a RIP-relative slot (`jmp *f@GOTPCREL(%rip)`); a `jcc` out of it (a
// conditional tail call: an exit when taken). Each gets a jump over the instructions just
// before it and itself: a straight line (no branch, no call, nothing that cannot run from a
// copy) that no branch of the function enters after its first instruction, 5 to 16 bytes.
// Its trampoline runs them, writes the exit record with %rsp and %rax as the exit sees them,
// and exits. An exit within a function's first bytes (a short function) shares the entry's
// patch: the function is patched whole (PlanRole::Call). Where no patch fits, the exit gets an
// int3 (int3_exits, with the reason), as the entry does where plan_jump() refuses it.
//
// A `jmp` through a register or a table (`jmp *%rax`, `jmp *(%rax,%rdx,8)`) is a tail call or
// a switch, which only its target at run time tells apart. A function with one has no patch
// anywhere (its targets could be inside one), so an int3 serves each such jump, and the tracer
// reads its target there (jump_target()): an exit when it is outside the function (or is its
// own entry).
//
// The module-wide checks (branches from other functions, landing pads, threads inside a range)
// are the tracer's, as for any jump plan (tracer/jump/jump_probes_checks.cpp). Frames left by a C++
// exception or longjmp run no exit: the recording closes them by their sp (record/pairing).
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/jump/jump_plan.hpp"

namespace probecost {

// An exit that an int3 serves.
struct ExitSite {
  Instruction exit;
  std::string why_not_jump;
};

struct CallPlans {
  // Set when the function's code does not decode: its exits cannot be found, nothing is planned.
  std::string undecodable;
  std::optional<JumpPlan> entry;  // PlanRole::Entry, or Call when the function is patched whole
  std::string why_no_entry;       // when there is no entry plan: an int3 there
  std::vector<JumpPlan> exits;    // PlanRole::Exit
  std::vector<ExitSite> int3_exits;
  // Indirect jumps whose target cannot be computed (a %fs or %gs operand, a 32-bit address):
  // a frame left through one is not seen leaving (it ends unmatched, by its sp).
  std::vector<Instruction> unseen_exits;
};

// Whether an address outside the function is still the function: GCC moves its unlikely paths
// (a throw, an abort) into a symbol of their own, "f.cold", reached by a jmp in the same frame.
// A jump there is no exit; the cold part's own ways out are not seen (a frame left through one
// ends unmatched, closed by its sp, never guessed).
using OwnPart = std::function<bool(RuntimeAddr)>;

// Whether the function's frame is still there at the instruction at `at`: its call frame
// information puts the return address elsewhere than on top of the stack (CFA != %rsp + 8). A
// jump from there is no tail call, wherever it goes: a stripped binary's f.cold has no symbol.
using FrameKept = std::function<bool(RuntimeAddr)>;

// Whether `in`, in the function [function, end), leaves it (see above); a conditional one only
// when taken, an indirect one through a register or a table only when its target is outside.
bool is_exit(const Instruction& in, RuntimeAddr function, RuntimeAddr end,
             const OwnPart& own_part = nullptr, const FrameKept& frame_kept = nullptr);

// `code`: the whole function at `function`, as its file holds it. Whatever cannot be patched
// is an int3, with the reason.
CallPlans plan_calls(RuntimeAddr function, std::span<const std::uint8_t> code,
                     const OwnPart& own_part = nullptr, const FrameKept& frame_kept = nullptr);

}  // namespace probecost
