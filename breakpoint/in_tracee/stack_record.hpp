#pragma once
// Stack snapshots (issue 26): what a jump probe's trampoline copies at each hit when stacks are
// asked for, perf's `--call-graph dwarf` model: the registers an unwinder needs to start (the
// site's RIP, RSP, and the callee-saved RBP, RBX, R12-R15, which .eh_frame rules recover the
// callers' frames from) and the top of the thread's stack, unwound later by the reader
// (tracer/symbols/stack_unwind.hpp), never by the thread that hit the probe.
//
// A snapshot is one record of a call buffer (call_buffer.hpp) made with stack_bytes > 0: every
// record of that buffer is a snapshot, its slot record_size bytes (a power of two, so that the
// sub-buffers hold whole records), of which only `copied` stack bytes are meaningful:
//   +0    tsc
//   +8    the thread pointer (%fs:0)
//   +16   bits 0-47: rsp at the site; bits 48-62: the probe id (as a call record's)
//   +24   rip (the site)      +32 rbp   +40 rbx   +48 r12   +56 r13   +64 r14   +72 r15
//   +80   bits 0-31: bytes copied from rsp up; bits 32-39: a SnapshotBound
//   +128  the stack bytes, [rsp, rsp + copied)
//
// Never read past the stack: the copy is min(stack_bytes, hi - rsp), where [lo, hi) is the
// thread's stack as the tracer entered it in the buffer's thread table (below) for the thread's
// pointer, and only when lo <= rsp < hi. A thread the table does not know (a raw clone), or whose
// rsp is elsewhere (an alternate signal stack, a makecontext coroutine's stack), gets no copy,
// and its record says which: nothing is guessed from memory that may end anywhere.
//
// The thread table: kThreadSlots + kThreadProbe entries of 32 bytes {tp, lo, hi, 0}, a thread's
// entry in one of the kThreadProbe slots from thread_slot(tp) on. The tracer writes an entry
// (lo and hi, then tp) before the thread runs (at the attach, or stopped at its clone), and
// frees it (tp = 0 first) once the thread is gone; an entry whose tp is a live thread's is never
// rewritten for another, so a thread that matched its tp reads its own bounds.
#include <cstdint>
#include <span>

namespace probecost::jump {

inline constexpr std::uint32_t kSnapshotHeader = 128;
inline constexpr std::uint32_t kSnapshotRipOffset = 24;
inline constexpr std::uint32_t kSnapshotRegsOffset = 32;  // rbp rbx r12 r13 r14 r15
inline constexpr std::uint32_t kSnapshotSizeOffset = 80;
inline constexpr std::uint32_t kThreadSlots = 1024;  // a power of two
inline constexpr std::uint32_t kThreadProbe = 8;
inline constexpr std::uint32_t kThreadEntry = 32;
inline constexpr std::uint64_t kThreadTableBytes =
    std::uint64_t{kThreadSlots + kThreadProbe} * kThreadEntry;
inline constexpr std::uint32_t kMinStackBytes = 64, kMaxStackBytes = 65536 - kSnapshotHeader;

// Why a snapshot has the bytes it has.
enum class SnapshotBound : std::uint8_t {
  Bounded = 0,        // min(stack_bytes, hi - rsp), inside the thread's known stack
  UnknownThread = 1,  // no entry for its thread pointer: nothing copied
  OffStack = 2,       // rsp outside its thread's stack (sigaltstack, a coroutine): nothing copied
  DirectionFlag = 3,  // DF set at the site (the copy is a rep movsb): nothing copied
};
const char* bound_name(SnapshotBound b);

// The first slot of a thread's entries.
constexpr std::uint32_t thread_slot(std::uint64_t tp) {
  return static_cast<std::uint32_t>((tp >> 12) ^ (tp >> 22)) & (kThreadSlots - 1);
}

// The slot size of a snapshot of up to `stack_bytes` bytes.
std::uint32_t snapshot_record_size(std::uint32_t stack_bytes);

struct StackSnapshot {
  std::uint64_t tsc = 0, tp = 0, sp = 0, rip = 0;
  std::uint64_t rbp = 0, rbx = 0, r12 = 0, r13 = 0, r14 = 0, r15 = 0;
  std::uint32_t id = 0;
  SnapshotBound bound = SnapshotBound::Bounded;
  std::span<const std::uint8_t> stack;  // [sp, sp + stack.size()), in the record
};

// Decodes one snapshot of a `record_size` slot (the tracee wrote it: `copied` is clamped to the
// slot, an unknown bound reads as UnknownThread).
StackSnapshot decode_snapshot(std::span<const std::uint8_t> record);

// The thread table, through a writable view of it (the tracer's, or a test's own).
class ThreadTable {
 public:
  explicit ThreadTable(std::span<std::uint8_t> table) : table_(table) {}
  // Enters thread `tp`'s stack [lo, hi); false when its slots are all taken.
  bool enter(std::uint64_t tp, std::uint64_t lo, std::uint64_t hi);
  void forget(std::uint64_t tp);

 private:
  std::uint64_t* entry(std::uint32_t slot) const;
  std::span<std::uint8_t> table_;
};

}  // namespace probecost::jump
