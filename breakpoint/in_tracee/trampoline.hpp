#pragma once
// The trampoline of a jump-patched probe: code in the tracee that the site's `jmp rel32` leads
// to. It does the static marker's work in the tracee itself (no trap, no stop, no system call),
// then runs the instructions the jump displaced, relocated, and jumps back after them:
//
//   lea -128(%rsp),%rsp           the 128 bytes below %rsp are the red zone, which a leaf
//                                 function may use without moving %rsp
//   push %rax; lahf; seto %al;    the six status flags, always: code may read flags its caller
//   push %rax                     set (hand-written routines do), mid-function or at an entry
//   [push %rcx/%rdx/%rsi...]      only what the body clobbers
//   lock incq hits                counting: exact with any number of threads (or per CPU with
//                                 rseq: no locked instruction, see PerCpuCounter)
//   or lock xadd hits + record    events: the same counter gives the record's slot; rdtsc,
//                                 24-byte record (event_ring.hpp)
//   or a call record              calls: {tsc, thread pointer, sp, args} into the
//                                 CPU's buffer in a restartable sequence (call_buffer.hpp)
//   [pops]; pop %rax; add $0x7f,%al; sahf; pop %rax; lea 128(%rsp),%rsp
//   the displaced instructions, relocated
//   jmp site+length
//
// A function's exit (PlanRole::Exit) is the other way round: the instructions before the ret
// or tail jump run first, relocated, so that the exit record sees %rsp and %rax as the ret
// will; then the record; then the ret (or the jump, or for a conditional tail call the jcc's
// taken side alone). A function short enough to patch whole (PlanRole::Call) gets both. No
// return address is ever changed: the unwinder (C++ exceptions, backtraces) sees the program's
// own frames.
//
// Memory the body touches is reached RIP-relative when within +-2 GiB of the trampoline, else
// through a register loaded with its absolute address.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "breakpoint/jump/jump_plan.hpp"

namespace probecost {

struct EventTarget {
  RuntimeAddr slots;           // the site's ring: slot 0, in the tracee
  std::uint64_t capacity = 0;  // records; a power of two, at most 2^31
  std::uint32_t id = 0;        // written into each record
};

// Counting without a locked instruction: one counter per CPU, incremented in a restartable
// sequence (rseq(2)). Needs glibc's per-thread rseq registration in the tracee (glibc >= 2.35,
// __rseq_size != 0); its `__rseq_offset` says where struct rseq is from the thread pointer.
// Not to be used at a site inside a program's own rseq critical section (no jump patch should
// be: its code runs elsewhere).
struct PerCpuCounter {
  RuntimeAddr counters;          // this site's row: `cpus` counters, 64 bytes apart
  std::uint32_t cpus = 0;        // a thread on CPU >= cpus counts in the hit counter instead
  std::int32_t rseq_offset = 0;  // glibc's __rseq_offset in the tracee
};

// Call records into the per-CPU call buffer (needs glibc's rseq registration, as PerCpuCounter).
struct CallRecordTarget {
  RuntimeAddr control;  // CPU 0's control block, in the tracee
  jump::CallBufferLayout layout;
  std::uint32_t id = 0;  // the probe's, in its records (below layout.max_ids)
  std::int32_t rseq_offset = 0;
  // With stack snapshots (layout.stack_bytes): the buffer's thread table in the tracee, and the
  // site (build_trampoline sets it from the plan).
  RuntimeAddr threads;
  RuntimeAddr site;
};

// How a trampoline keeps the status flags: lahf/seto..sahf (the default), or pushfq/popfq,
// slower. None leaves them to the counting's lock inc: wrong wherever code reads the flags it
// finds (an entry included), kept only to measure what keeping them costs and to show tests
// the difference.
enum class FlagSave { Lahf, Pushfq, None };

struct TrampolineSpec {
  RuntimeAddr address;      // where the trampoline runs, in the tracee
  RuntimeAddr hit_counter;  // 8 bytes, 8-aligned; with events, also the ring's position counter
  std::optional<EventTarget> events;
  FlagSave flag_save = FlagSave::Lahf;
  // Counting per CPU (ignored with events, which count with their lock xadd); the hit counter
  // then only counts threads without rseq. Hits = hit counter + the row's sum.
  std::optional<PerCpuCounter> per_cpu;
  // Call records instead of counting: an entry, exit or both records by the plan's role (the
  // hit counter is not touched).
  std::optional<CallRecordTarget> calls;
  // With `calls`, each entry first writes a stack snapshot into
  // this buffer (its layout's stack_bytes > 0), then its entry record (the reader matches the
  // two by thread, stack slot and probe: the snapshot is the thread's last one before it).
  std::optional<CallRecordTarget> stacks;
};

struct Trampoline {
  RuntimeAddr address;
  std::vector<std::uint8_t> code;
  // Each displaced instruction after the first, and its copy in the trampoline.
  std::vector<std::pair<RuntimeAddr, RuntimeAddr>> copies;
  // The first displaced instruction's copy, when it has one (an exit trampoline's lone exit
  // instruction is emitted, not copied).
  std::optional<RuntimeAddr> block;
  // The block's jump back to the instruction after the displaced ones (an entry trampoline's).
  std::optional<RuntimeAddr> jump_back;

  RuntimeAddr end() const { return address + static_cast<std::int64_t>(code.size()); }
  // Where a thread whose RIP is `pc`, between two displaced instructions when the patch goes in,
  // continues the same work: in the copy of the instruction at `pc`. It skips the probe's work,
  // as it should: the thread had passed the site before the jump was there. Nothing for any other
  // pc (a thread at the site itself may stay: it will take the jump).
  std::optional<RuntimeAddr> moved_pc(RuntimeAddr pc) const;
};

// Nothing, with `why`, when the displaced instructions cannot run from spec.address (a
// RIP-relative operand or a branch target out of reach). An exit or whole-function plan needs
// spec.calls. Error if the plan cannot become bytes (why_malformed(): a planner's mistake).
std::optional<Trampoline> build_trampoline(const JumpPlan& plan, const TrampolineSpec& spec,
                                           std::string& why);

}  // namespace probecost
