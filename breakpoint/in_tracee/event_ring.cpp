#include "breakpoint/in_tracee/event_ring.hpp"

namespace probecost::jump {

namespace {

// Other processes write these words: every access is atomic, and the order of the reader's
// loads is what the protocol relies on.
std::uint64_t load(const std::uint64_t* p, int order = __ATOMIC_RELAXED) {
  return __atomic_load_n(p, order);
}

const std::uint64_t* word(const RingView& ring, std::uint64_t slot, std::uint32_t offset) {
  return reinterpret_cast<const std::uint64_t*>(ring.slots + slot * sizeof(Record) + offset);
}

enum class Slot { Complete, Overwritten, Pending };

// Reads the record at `position` if its slot holds it whole.
Slot read_slot(const RingView& ring, std::uint64_t position, Record& out) {
  std::uint64_t slot = position & (ring.capacity - 1);
  const std::uint64_t* commit = word(ring, slot, kCommitOffset);
  std::uint64_t before = load(commit, __ATOMIC_ACQUIRE);
  std::uint32_t seq = static_cast<std::uint32_t>(before >> 32);
  if (seq != ring_seq(position)) {
    // 0: a writer is at work in this slot. Otherwise the sequence word names the position whose
    // record the slot holds: a later one means ours was overwritten; an earlier one, that our
    // writer has taken the position but not begun (or that a writer preempted for a whole lap of
    // the ring came back and wrote an old record over ours: a later lap will tell).
    std::int32_t ahead = static_cast<std::int32_t>(seq - ring_seq(position)) / 2;
    return seq != 0 && ahead > 0 ? Slot::Overwritten : Slot::Pending;
  }
  out.tsc = load(word(ring, slot, 0));
  out.arg = load(word(ring, slot, 8));
  out.id = static_cast<std::uint32_t>(before);
  out.reserved = seq;
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return load(commit) == before ? Slot::Complete : Slot::Overwritten;
}

}  // namespace

Drained drain(const RingView& ring, std::uint64_t& cursor, bool final) {
  Drained out;
  std::uint64_t head = load(ring.head, __ATOMIC_ACQUIRE);
  if (head - cursor > ring.capacity) {  // lapped: those slots hold later records now
    out.lost += head - ring.capacity - cursor;
    cursor = head - ring.capacity;
  }
  for (; cursor < head; ++cursor) {
    Record r;
    switch (read_slot(ring, cursor, r)) {
      case Slot::Complete:
        out.records.push_back(r);
        break;
      case Slot::Overwritten:
        ++out.lost;
        break;
      case Slot::Pending:
        // Not written yet, or being written: by its own writer (wait for it), or by one a lap
        // ahead, once the counter has moved a whole ring past it (then it is lost).
        if (!final && cursor + ring.capacity > load(ring.head, __ATOMIC_ACQUIRE)) return out;
        ++out.lost;
        break;
    }
  }
  return out;
}

}  // namespace probecost::jump
