#pragma once
// The trampoline of a jump-patched probe: code in the tracee that the site's `jmp rel32` leads
// to. It does the static marker's work in the tracee itself (no trap, no stop, no system call),
// then runs the instructions the jump displaced, relocated, and jumps back after them:
//
//   [lea -128(%rsp),%rsp]       only if anything is pushed: the 128 bytes below %rsp are the
//                               red zone, which a leaf function may use without moving %rsp
//   [pushfq]                    only where the plan says the status flags may be live
//   [push %rax/%rcx/%rdx/%rsi]  only what the body clobbers
//   lock incq hits              exact with any number of threads
//   [event record]              lock xadd on the ring's head, rdtsc, 24-byte record (event_ring)
//   [pops, popfq, lea 128(%rsp),%rsp]
//   the displaced instructions, relocated
//   jmp site+length
//
// Memory the body touches is reached RIP-relative when within +-2 GiB of the trampoline, else
// through a register loaded with its absolute address.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/jump_plan.hpp"

namespace probecost {

struct EventTarget {
  RuntimeAddr ring;            // its RingHeader, in the tracee
  std::uint64_t capacity = 0;  // a power of two, at most 2^31 (the header's)
  std::uint32_t id = 0;        // written into each record
};

struct TrampolineSpec {
  RuntimeAddr address;      // where the trampoline runs, in the tracee
  RuntimeAddr hit_counter;  // 8 bytes, 8-aligned
  std::optional<EventTarget> events;
};

struct Trampoline {
  RuntimeAddr address;
  std::vector<std::uint8_t> code;
  // Each displaced instruction after the first, and its copy in the trampoline.
  std::vector<std::pair<RuntimeAddr, RuntimeAddr>> copies;

  RuntimeAddr end() const { return address + static_cast<std::int64_t>(code.size()); }
  // Where a thread whose RIP is `pc`, between two displaced instructions when the patch goes in,
  // continues the same work: in the copy of the instruction at `pc`. It skips the probe's work,
  // as it should: the thread had passed the site before the jump was there. Nothing for any other
  // pc (a thread at the site itself may stay: it will take the jump).
  std::optional<RuntimeAddr> moved_pc(RuntimeAddr pc) const;
};

// Nothing, with `why`, when the displaced instructions cannot run from spec.address (a
// RIP-relative operand or a branch target out of reach).
std::optional<Trampoline> build_trampoline(const JumpPlan& plan, const TrampolineSpec& spec,
                                           std::string& why);

}  // namespace probecost
