#pragma once
// One jump-patched probe site in a tracee: the 5-byte `jmp rel32` to its trampoline over the
// instructions a JumpPlan chose, padded with int3 to their end. Like BreakpointSite, it owns the
// bytes it displaced; install() and remove() are idempotent and read back what they wrote.
//
// Bytes are written in the order of the kernel's text_poke_bp(): int3 at byte 0, then bytes
// 1..n-1, then byte 0. A thread that runs meanwhile meets the old instruction, an int3, or the
// whole jump, never a torn instruction: while bytes 1..n-1 change, byte 0 is an int3 and no
// thread can get past it. One that traps on it continues in the trampoline (trap_target()),
// which is right in both directions: the trampoline counts the hit and runs the original
// instructions. Removal writes in the same order, with the original bytes.
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "breakpoint/jump/jump_plan.hpp"
#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost {

inline constexpr std::uint8_t kJmpRel32 = 0xE9;

struct JumpPatch {
  RuntimeAddr site;
  std::size_t length = 0;  // kJumpLength .. kMaxPatchLength
  std::array<std::uint8_t, kMaxPatchLength> original{};
  std::array<std::uint8_t, kMaxPatchLength> patch{};  // jmp rel32, then int3 to `length`
  RuntimeAddr trampoline;

  // Error if the trampoline is beyond the reach of a rel32 from the site, or the plan cannot
  // become bytes (why_malformed(): a planner's mistake).
  static JumpPatch make(const JumpPlan& plan, RuntimeAddr trampoline);
  std::span<const std::uint8_t> original_bytes() const { return {original.data(), length}; }
  std::span<const std::uint8_t> patch_bytes() const { return {patch.data(), length}; }
};

// What the bytes at a site are, with respect to a patch.
enum class PatchState {
  Original,    // the original bytes
  Patched,     // the jump and its padding
  Transition,  // int3 at byte 0, or a mix of the two: an install or removal was interrupted
  Foreign,     // something else: the code changed under us
};
PatchState patch_state(const JumpPatch& patch, std::span<const std::uint8_t> now);

// What a code patch needs from whoever controls the threads that may run the code. A tracer
// that has stopped every thread, and moved any thread inside a patched range (with
// Trampoline::moved_pc), needs neither and passes none.
class CodeSync {
 public:
  virtual ~CodeSync() = default;
  // After each write: every CPU that may run the code must see the new bytes before it runs them
  // (cross-modifying code, Intel SDM vol. 3 §8.1.3; the kernel's text_poke_sync() is an IPI
  // to every CPU, user space has membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)).
  virtual void serialize() = 0;
  // During install(), once the int3 at byte 0 is seen everywhere and before bytes 1..n-1
  // change: no thread can enter [site, site+length) any more, and one already between two of its
  // instructions must leave, e.g. to the copy of its next instruction (Trampoline::moved_pc).
  virtual void evacuate(RuntimeAddr site, std::size_t length) = 0;
};

class PatchSite {
 public:
  // Error if the patch's length is not that of a jump (kJumpLength .. kMaxPatchLength).
  PatchSite(TraceeMemory& memory, const JumpPatch& patch, std::string label = {});
  PatchSite(const PatchSite&) = delete;
  PatchSite& operator=(const PatchSite&) = delete;

  // Error if the site does not hold the original bytes, or the jump does not read back.
  void install(CodeSync* sync = nullptr);
  // Error if the original bytes do not read back.
  void remove(CodeSync* sync = nullptr);
  // For a site found patched (or half so) by an earlier tracer: remove() will restore it.
  void adopt() { installed_ = true; }
  // The tracee is gone (exit, exec): its memory no longer holds our bytes; forget them.
  void forget() { installed_ = false; }

  bool installed() const { return installed_; }
  RuntimeAddr address() const { return patch_.site; }
  const JumpPatch& patch() const { return patch_; }
  const std::string& label() const { return label_; }
  // Where a thread that trapped on the int3 at byte 0 (RIP = site + 1) during install() or
  // remove() must continue: the trampoline.
  RuntimeAddr trap_target() const { return patch_.trampoline; }

 private:
  void write_in_order(std::span<const std::uint8_t> bytes, CodeSync* sync, bool evacuate);
  void expect(std::span<const std::uint8_t> bytes, const char* what);
  TraceeMemory* memory_;
  JumpPatch patch_;
  std::string label_;
  bool installed_ = false;
};

// Puts the original bytes back at a site a tracer patched and left (probecost restore), in the
// safe order, if it holds the patch or a half-written one. Returns what it found there: Foreign
// code is left alone. Error if the patch's length is not that of a jump.
PatchState restore(TraceeMemory& memory, const JumpPatch& patch, CodeSync* sync = nullptr);

}  // namespace probecost
