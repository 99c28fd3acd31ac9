#include "breakpoint/in_tracee/call_buffer.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <ctime>
#include <string>

#include "breakpoint/in_tracee/area_format.hpp"
#include "breakpoint/in_tracee/stack_record.hpp"
#include "common/error.hpp"

namespace probecost::jump {

namespace {

constexpr std::uint64_t kPage = 4096;

bool power_of_two(std::uint64_t v) {
  return v && !(v & (v - 1));
}

using area::round_up;

// Other processes write these words: every access is atomic, and the order of the reader's
// loads and stores is what the protocol relies on.
std::uint64_t load(const std::uint8_t* at, int order = __ATOMIC_RELAXED) {
  return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(at), order);
}

// The futex words live in a MAP_SHARED memfd that two processes map: shared futexes (no
// FUTEX_PRIVATE_FLAG), which the kernel keys by the file page, not by the address.
long futex(void* word, int op, std::uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

}  // namespace

std::uint32_t call_record_size(int args) {
  if (args < 0 || args > kMaxCallArgs) throw Error("call records hold 0 to 6 arguments");
  std::uint32_t bytes = 8 + 8 * static_cast<std::uint32_t>(std::max(args, 1));
  return bytes <= 16 ? 16 : bytes <= 32 ? 32 : 64;
}

CallBufferLayout CallBufferLayout::of(const CallBufferConfig& config) {
  CallBufferLayout l;
  l.cpus = config.cpus;
  l.args = config.args;
  l.stack_bytes = config.stack_bytes;
  l.record_size =
      config.stack_bytes ? snapshot_record_size(config.stack_bytes) : call_record_size(config.args);
  l.max_ids = config.max_ids;
  if (!config.cpus || config.cpus > 65536) throw Error("call buffer: 1 to 65536 CPUs");
  std::uint32_t ids = config.stack_bytes ? kMaxCallIds : kMaxRecordIds;
  if (!config.max_ids || config.max_ids > ids)
    throw Error("call buffer: 1 to " + std::to_string(ids) + " probe ids");
  if (!power_of_two(config.subbuffers) || config.subbuffers < 2 || !power_of_two(config.capacity) ||
      config.capacity / config.subbuffers < kPage || config.capacity > (1ull << 31))
    throw Error("call buffer: " + std::to_string(config.capacity) + " bytes in " +
                std::to_string(config.subbuffers) +
                " sub-buffers: both powers of two, sub-buffers of 4 KiB at least, 2 GiB at most");
  l.capacity = config.capacity;
  l.subbuffer = config.capacity / config.subbuffers;
  if (l.subbuffer < l.record_size)
    throw Error("call buffer: sub-buffers of " + std::to_string(l.subbuffer) +
                " bytes cannot hold a record of " + std::to_string(l.record_size));
  // Call records count their entries and exits lost apart; snapshots are entries only.
  std::uint64_t ctl = kLostOffset + 8ull * config.max_ids * (config.stack_bytes ? 1 : 2);
  while ((std::uint64_t{1} << l.ctl_shift) < ctl) ++l.ctl_shift;
  l.ctl_offset = kPage;
  l.threads_offset = round_up(l.ctl_offset + (l.cpus + 1ull) * l.ctl_stride(), kPage);
  l.data_offset = l.threads_offset;
  if (l.stack_bytes) l.data_offset = round_up(l.threads_offset + kThreadTableBytes, kPage);
  l.size = l.data_offset + l.cpus * l.capacity;
  return l;
}

bool CallDecoder::next(const std::uint8_t* bytes, CallRecord& out) {
  std::uint64_t w[1 + kMaxCallArgs];
  std::memcpy(w, bytes, 8 * (1 + std::max(args_, 1)));
  if (w[0] & kSyncBit) {
    synced_ = true;
    tp_ = w[1];
    tsc_hi_ = w[0] & ((1ull << kSyncSpShift) - 1);
    sp_hi_ = (w[0] & ~kSyncBit) >> kSyncSpShift;
    return false;
  }
  if (!synced_) {
    ++orphans_;
    return false;
  }
  out = CallRecord{};
  out.tsc = tsc_hi_ << kWindowBits | (w[0] & kWindowMask);
  out.tp = tp_;
  out.sp = sp_hi_ << kWindowBits | ((w[0] >> kWindowBits) & kWindowMask);
  out.id = static_cast<std::uint32_t>((w[0] >> kIdShift) & (kMaxRecordIds - 1));
  out.exit = (w[0] & kEventExitBit) != 0;
  int values = out.exit ? 1 : args_;
  std::copy(w + 1, w + 1 + values, out.values.begin());
  return true;
}

std::int64_t call_record_id(const std::uint8_t* bytes) {
  std::uint64_t w0;
  std::memcpy(&w0, bytes, 8);
  if (w0 & kSyncBit) return -1;
  return static_cast<std::int64_t>((w0 >> kIdShift) & (kMaxRecordIds - 1));
}

static_assert(sizeof(BufferHeader) <= kWakeOffset, "the header's words come after it");

void format_call_buffer(std::span<std::uint8_t> view, std::uint64_t tracee_at,
                        const CallBufferLayout& l) {
  if (view.size() < l.size) throw Error("call buffer: the mapping is smaller than its layout");
  BufferHeader h{};
  std::memcpy(h.magic, kCallBufferMagic, sizeof h.magic);
  h.version = kCallBufferVersion;
  h.header_size = sizeof h;
  h.cpus = l.cpus;
  h.record_size = l.record_size;
  h.max_ids = l.max_ids;
  h.ctl_shift = l.ctl_shift;
  h.capacity = l.capacity;
  h.subbuffer = l.subbuffer;
  h.ctl_offset = l.ctl_offset;
  h.data_offset = l.data_offset;
  h.size = l.size;
  h.tracee_address = tracee_at;
  h.args = l.args;
  h.stack_bytes = l.stack_bytes;
  std::memcpy(view.data(), &h, sizeof h);
  for (std::uint32_t cpu = 0; cpu < l.cpus; ++cpu) {
    std::uint64_t data = tracee_at + l.data_offset + cpu * l.capacity;
    std::memcpy(view.data() + l.ctl_offset + cpu * l.ctl_stride() + kDataPointerOffset, &data, 8);
  }
}

CallReader::CallReader(std::span<std::uint8_t> view, const CallBufferLayout& layout,
                       std::uint64_t start_tsc, const Options& options)
    : view_(view), layout_(layout), options_(options), cpus_(layout.cpus) {
  for (Cpu& c : cpus_) {
    c.watermark = start_tsc;
    c.at_end = c.at_taken = CallDecoder(layout.args);
  }
}

std::uint8_t* CallReader::ctl(std::uint32_t cpu) const {
  return view_.data() + layout_.ctl_offset + cpu * layout_.ctl_stride();
}

// Up to where CPU `c` may be read now: the end of its last finished sub-buffer, or its head when
// the sub-buffer it is in has been partly filled for the flush interval (or at the end).
std::uint64_t CallReader::readable_end(Cpu& c, std::uint64_t head, std::uint64_t now, bool final) {
  if (final) return head;
  std::uint64_t finished = head & ~(layout_.subbuffer - 1);
  if (head == finished || head == c.cursor) {
    c.partial_sub = 0;
    return std::max(finished, c.cursor);
  }
  std::uint64_t sub = head / layout_.subbuffer + 1;
  if (c.partial_sub != sub) {
    c.partial_sub = sub;
    c.partial_since = now;
  }
  if (now - c.partial_since < options_.flush_ticks) return std::max(finished, c.cursor);
  c.partial_since = now;  // the next flush of this sub-buffer waits a whole interval again
  // Whole pages only, when there is one to read: the piece then goes to the spool as one
  // O_DIRECT write, and the next starts on a page too (spool_writer.hpp). A flush up to the
  // head instead leaves a piece that begins and ends inside a page, two write(2)s into the
  // page cache besides, each at every flush (the drain's CPU on a slow stream: docs/record.md).
  // The records of the last page part filled wait for the next flush, or the sub-buffer's end.
  std::uint64_t pages = head & ~(kPage - 1);
  if (kPage % layout_.record_size == 0 && pages > c.cursor) return pages;
  return head;
}

void CallReader::read_range(std::uint32_t cpu, Cpu& c, std::uint64_t end, const Sink* sink) {
  if (end == c.cursor) return;
  const std::uint8_t* data = view_.data() + layout_.data_offset + cpu * layout_.capacity;
  if (!sink && c.taken == c.copied.size()) {
    c.copied.clear();
    c.taken = 0;
  }
  // In at most two pieces: the ring wraps once at most between cursor and end.
  for (std::uint64_t at = c.cursor; at < end;) {
    std::uint64_t offset = at & (layout_.capacity - 1);
    std::uint64_t n = std::min(end - at, layout_.capacity - offset);
    if (sink) {
      (*sink)(cpu, data + offset, n);
    } else {
      std::size_t from = c.copied.size();
      c.copied.insert(c.copied.end(), data + offset, data + offset + n);
      // The newest record's time, from our copy (the tracee may rewrite its ring meanwhile).
      CallRecord r;
      for (std::size_t i = from; i < c.copied.size(); i += layout_.record_size)
        if (c.at_end.next(c.copied.data() + i, r)) c.watermark = std::max(c.watermark, r.tsc);
    }
    at += n;
  }
  read_ += (end - c.cursor) / layout_.record_size;
  c.cursor = end;
  // The writer checks this before it starts a sub-buffer: our copies are made.
  std::uint8_t* block = ctl(cpu);
  __atomic_store_n(reinterpret_cast<std::uint64_t*>(block + kConsumedOffset), c.cursor,
                   __ATOMIC_RELEASE);
  // A writer increments `waiting` before it loads consumed to wait on it: with this fence
  // between our store and our load, either it sees the new consumed or we see it waiting.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (load(block + kWaitingOffset)) futex(block + kConsumedOffset, FUTEX_WAKE, INT_MAX, nullptr);
}

std::uint64_t CallReader::poll_cpus(std::uint64_t now, bool final, const Sink* sink) {
  std::uint64_t before = read_;
  for (std::uint32_t cpu = 0; cpu < layout_.cpus; ++cpu) {
    Cpu& c = cpus_[cpu];
    // Acquire: the record bytes below head are loaded after it, so they are complete.
    std::uint64_t head = load(ctl(cpu) + kHeadOffset, __ATOMIC_ACQUIRE);
    if (head < c.cursor || head - c.cursor > layout_.capacity || head % layout_.record_size)
      throw Error("call buffer of CPU " + std::to_string(cpu) + ": head " + std::to_string(head) +
                  " is not where its writers can have put it (read " + std::to_string(c.cursor) +
                  ")");
    read_range(cpu, c, readable_end(c, head, now, final), sink);
    // Read up to its head: what it writes next is stamped after `now`, less a commit's slack.
    if (c.cursor == head && now > options_.commit_slack)
      c.watermark = std::max(c.watermark, now - options_.commit_slack);
  }
  final_ = final;
  return (read_ - before) * layout_.record_size;
}

void CallReader::poll(std::uint64_t now, bool final) {
  poll_cpus(now, final, nullptr);
}

std::uint64_t CallReader::poll(std::uint64_t now, bool final, const Sink& sink) {
  return poll_cpus(now, final, &sink);
}

std::uint32_t CallReader::wake_word() const {
  return __atomic_load_n(reinterpret_cast<const std::uint32_t*>(header_word(kWakeOffset)),
                         __ATOMIC_ACQUIRE);
}

// A writer bumps the wake word (a locked instruction) and then loads `sleeping`: if it saw 0,
// its bump came before our store of 1, so before the kernel's compare in FUTEX_WAIT, which then
// returns at once (the word is no longer `seen`). Either way no wake is missed.
void CallReader::wait_for_writers(std::uint32_t seen, long timeout_ns) const {
  timespec t{timeout_ns / 1'000'000'000, timeout_ns % 1'000'000'000};
  auto* sleeping = reinterpret_cast<std::uint32_t*>(header_word(kSleepingOffset));
  __atomic_store_n(sleeping, 1u, __ATOMIC_SEQ_CST);
  futex(header_word(kWakeOffset), FUTEX_WAIT, seen, &t);
  __atomic_store_n(sleeping, 0u, __ATOMIC_RELAXED);
}

void CallReader::wake_reader() {
  __atomic_fetch_add(reinterpret_cast<std::uint32_t*>(header_word(kWakeOffset)), 1,
                     __ATOMIC_SEQ_CST);
  futex(header_word(kWakeOffset), FUTEX_WAKE, INT_MAX, nullptr);
}

void CallReader::set_blocking(bool on, long bound_ns) {
  if (on) {
    timespec t{bound_ns / 1'000'000'000, bound_ns % 1'000'000'000};
    std::memcpy(header_word(kWaitBoundOffset), &t, sizeof t);
  }
  __atomic_store_n(reinterpret_cast<std::uint32_t*>(header_word(kBlockingOffset)), on ? 1u : 0u,
                   __ATOMIC_RELEASE);
  if (!on) {
    // Writers waiting now drop at once rather than at the end of their bound.
    for (std::uint32_t cpu = 0; cpu < layout_.cpus; ++cpu)
      if (load(ctl(cpu) + kWaitingOffset))
        futex(ctl(cpu) + kConsumedOffset, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

bool CallReader::blocking() const {
  return __atomic_load_n(reinterpret_cast<const std::uint32_t*>(header_word(kBlockingOffset)),
                         __ATOMIC_ACQUIRE) != 0;
}

std::uint64_t CallReader::horizon() const {
  if (final_) return UINT64_MAX;
  std::uint64_t h = UINT64_MAX;
  for (const Cpu& c : cpus_) h = std::min(h, c.watermark);
  return h;
}

const CallRecord* CallReader::Cpu::peek(std::uint32_t record_size) {
  while (!next && taken < copied.size()) {
    CallRecord r;
    if (at_taken.next(copied.data() + taken, r)) next = r;
    if (!next) taken += record_size;  // a sync
  }
  return next ? &*next : nullptr;
}

void CallReader::take(std::vector<CallRecord>& out) {
  std::uint64_t h = horizon();
  // Each CPU's records are in TSC order: merge them, oldest first.
  for (;;) {
    Cpu* oldest = nullptr;
    std::uint64_t oldest_tsc = h;
    for (Cpu& c : cpus_) {
      const CallRecord* r = c.peek(layout_.record_size);
      if (r && r->tsc < oldest_tsc) {
        oldest = &c;
        oldest_tsc = r->tsc;
      }
    }
    if (!oldest) return;
    out.push_back(*oldest->next);
    oldest->next.reset();
    oldest->taken += layout_.record_size;
  }
}

std::uint64_t CallReader::lost(std::uint32_t id, bool exit) const {
  if (id >= layout_.max_ids || (exit && layout_.stack_bytes)) return 0;
  std::uint64_t n = 0;
  for (std::uint32_t cpu = 0; cpu <= layout_.cpus; ++cpu)
    n += load(ctl(cpu) + layout_.lost_offset(id, exit));
  return n;
}

std::uint64_t CallReader::lost(std::uint32_t id) const {
  return lost(id, false) + lost(id, true);
}

std::uint64_t CallReader::lost_total() const {
  std::uint64_t n = 0;
  for (std::uint32_t id = 0; id < layout_.max_ids; ++id) n += lost(id);
  return n;
}

}  // namespace probecost::jump
