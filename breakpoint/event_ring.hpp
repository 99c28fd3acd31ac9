#pragma once
// The ring of event records that jump-patched probes write from inside the tracee, and the reader
// that drains it from another process (the tracer) while the tracee runs: both map the same
// memfd pages.
//
// Writers (the trampolines, any number of threads, every site of an area) take a position with
// `lock xadd` on `head` and write the record into slot (position & (capacity - 1)): no lock, no
// system call, no allocation. The record is the static marker's, 24 bytes
// (inferior/marker.hpp): {tsc, arg, id, reserved}; here `reserved` holds the slot's sequence
// word, which tells a reader whether the slot holds a complete record and for which position:
//
//   seq = low 32 bits of (2 * position + 1)   (odd, so never 0)
//
// A writer stores, in this order: seq = 0 ("being written"), tsc, arg, then {id, seq} as one
// 8-byte store, the commit. x86 keeps stores in program order (TSO), so a reader that loads seq,
// then the record, then seq again, and sees the expected seq both times, has read a record that
// no writer was changing meanwhile. A slower reader loses records: the writers never wait. Lost
// ones are counted by the reader, from `head` and from sequence words that show a slot reused.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
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

struct alignas(64) RingHeader {
  std::uint64_t head;  // positions ever taken; alone on its cache line, every hit writes it
  std::uint8_t pad_[56];
  std::uint64_t capacity;      // slots, a power of two, at most 2^31
  std::uint32_t record_size;   // sizeof(Record)
  std::uint32_t reserved;      // 0
  std::uint64_t slots_offset;  // from this header to slot 0
};
static_assert(sizeof(RingHeader) == 128);

inline constexpr std::uint64_t kMaxRingCapacity = 1ull << 31;
inline constexpr std::uint32_t kCommitOffset = 16;  // the {id, seq} word in a slot
inline constexpr std::uint32_t kSeqOffset = 20;     // seq alone

inline std::uint32_t ring_seq(std::uint64_t position) {
  return static_cast<std::uint32_t>(2 * position + 1);
}

inline bool valid_ring_capacity(std::uint64_t capacity) {
  return capacity && !(capacity & (capacity - 1)) && capacity <= kMaxRingCapacity;
}

// The bytes a ring of `capacity` slots takes, header included.
std::uint64_t ring_bytes(std::uint64_t capacity);
// Writes an empty ring's header at `at` (capacity: a power of two, at most kMaxRingCapacity).
void init_ring(RingHeader& at, std::uint64_t capacity);

// A ring as the reader sees it, its shape checked once against the mapping that holds it: later
// reads trust these copies, never the header's words again (the tracee can write over them).
struct RingView {
  const RingHeader* header = nullptr;
  const std::uint8_t* slots = nullptr;
  std::uint64_t capacity = 0;
};
// `bytes`: from the ring header to the end of the mapping. Nothing, with `why`, if the header
// does not describe a ring that fits.
std::optional<RingView> view_ring(std::span<const std::uint8_t> bytes, std::string& why);

struct Drained {
  std::vector<Record> records;  // in position order
  std::uint64_t lost = 0;       // positions passed over without a record: overwritten, or torn
};

// Drains what the writers completed since `cursor` (positions read so far; start at 0).
// A position whose record is still being written stops the drain there, to be read by a later
// call, unless `final` (the writers are all stopped or gone): then it counts as lost. Across
// calls, records + lost = head once a final drain has run.
Drained drain(const RingView& ring, std::uint64_t& cursor, bool final = false);

}  // namespace probecost::jump
