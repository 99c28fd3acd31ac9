#pragma once
// The ring of event records a jump-patched probe writes from inside the tracee, and the reader
// that drains it from another process (the tracer) while the tracee runs: both map the same
// memfd pages. Each site with events has a ring of its own, and its hit counter is the ring's
// position counter: one `lock xadd` per hit both counts the hit exactly and takes a slot.
//
// Writers (the site's trampoline, in any number of threads) take a position with `lock xadd` on
// the counter and write the record into slot (position & (capacity - 1)): no lock, no system
// call, no allocation. The record is the static marker's, 24 bytes (inferior/marker.hpp):
// {tsc, arg, id, reserved}; here `reserved` holds the slot's sequence word, which tells a reader
// whether the slot holds a complete record and for which position:
//
//   seq = low 32 bits of (2 * position + 1)   (odd, so never 0)
//
// A writer stores, in this order: seq = 0 ("being written"), tsc, arg, then {id, seq} as one
// 8-byte store, the commit. x86 keeps stores in program order (TSO), so a reader that loads seq,
// then the record, then seq again, and sees the expected seq both times, has read a record that
// no writer was changing meanwhile. A slower reader loses records: the writers never wait. Lost
// ones are counted by the reader, from the counter and from sequence words that show a slot
// reused.
#include <cstdint>
#include <span>
#include <vector>

namespace probecost::jump {

// Same layout as probecost::marker::Record.
struct Record {
  std::uint64_t tsc;
  std::uint64_t arg;  // %rdi at the site: the first argument, at a function's entry
  std::uint32_t id;   // the probe's id
  std::uint32_t reserved;
};
static_assert(sizeof(Record) == 24);

inline constexpr std::uint64_t kMaxRingCapacity = 1ull << 31;
inline constexpr std::uint32_t kCommitOffset = 16;  // the {id, seq} word in a slot
inline constexpr std::uint32_t kSeqOffset = 20;     // seq alone

inline std::uint32_t ring_seq(std::uint64_t position) {
  return static_cast<std::uint32_t>(2 * position + 1);
}

inline bool valid_ring_capacity(std::uint64_t capacity) {
  return capacity && !(capacity & (capacity - 1)) && capacity <= kMaxRingCapacity;
}

// The bytes a ring of `capacity` records takes.
inline std::uint64_t ring_bytes(std::uint64_t capacity) {
  return capacity * sizeof(Record);
}

// A ring as the reader sees it, in its own mapping: the position counter (the site's hit
// counter) and the slots. The shape is what the reader set up or checked itself; it is never
// read again from memory the tracee can write.
struct RingView {
  const std::uint64_t* head = nullptr;
  const std::uint8_t* slots = nullptr;
  std::uint64_t capacity = 0;  // a power of two
};

struct Drained {
  std::vector<Record> records;  // in position order
  std::uint64_t lost = 0;       // positions passed over without a record: overwritten, or torn
};

// Drains what the writers completed since `cursor` (positions read so far; start at 0).
// A position whose record is still being written stops the drain there, to be read by a later
// call, unless `final` (the writers are all stopped or gone): then it counts as lost. Across
// calls, records + lost = the counter once a final drain has run.
Drained drain(const RingView& ring, std::uint64_t& cursor, bool final = false);

}  // namespace probecost::jump
