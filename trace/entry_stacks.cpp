#include "trace/entry_stacks.hpp"

#include <sys/mman.h>

#include <cstring>

#include "common/error.hpp"

namespace probecost::trace_run {

// One snapshot as the spool keeps it: its third word is a snapshot's (CallSpool::Kind::
// Snapshots finds the probe id of refs it could not keep there).
struct EntryStacks::Ref {
  std::uint64_t tsc = 0, tp = 0, sp_id = 0;
  std::uint32_t stack = 0;  // distinct stack + 1; 0: none, why in `why`
  std::uint32_t why = 0;    // record::StackMissing
};

namespace {

constexpr std::size_t kBatchBytes = 64 << 10;

record::StackMissing why_not_copied(jump::SnapshotBound b) {
  switch (b) {
    case jump::SnapshotBound::Bounded:
      return record::StackMissing::none;
    case jump::SnapshotBound::UnknownThread:
      return record::StackMissing::unknown_thread;
    case jump::SnapshotBound::OffStack:
      return record::StackMissing::off_stack;
    case jump::SnapshotBound::DirectionFlag:
      return record::StackMissing::direction_flag;
  }
  return record::StackMissing::unknown_thread;
}

std::uint64_t sp_id(std::uint64_t sp, std::uint32_t id) {
  return (sp & jump::kSpMask) | static_cast<std::uint64_t>(id) << jump::kIdShift;
}

}  // namespace

EntryStacks::EntryStacks(const std::string& dir, std::uint32_t max_ids)
    : spool_(dir, sizeof(Ref), max_ids, CallSpool::Kind::Snapshots) {
  static_assert(sizeof(Ref) == 32);
}

std::uint32_t EntryStacks::intern(std::vector<std::uint64_t> ips, bool truncated) {
  Distinct d{std::move(ips), truncated};
  auto [it, added] = index_.try_emplace(d, static_cast<std::uint32_t>(distinct_.size()));
  if (added) distinct_.push_back(std::move(d));
  return it->second;
}

void EntryStacks::add(std::uint32_t cpu, const jump::StackSnapshot& s,
                      const SnapshotUnwinder::Stack& st) {
  Ref ref;
  ref.tsc = s.tsc;
  ref.tp = s.tp;
  ref.sp_id = sp_id(s.sp, s.id);
  auto why = why_not_copied(s.bound);
  if (why == record::StackMissing::none && st.ips.empty()) why = record::StackMissing::not_unwound;
  if (why == record::StackMissing::none) ref.stack = intern(st.ips, st.truncated) + 1;
  ref.why = static_cast<std::uint32_t>(why);
  if (batches_.size() <= cpu) batches_.resize(cpu + 1);
  auto& b = batches_[cpu];
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&ref);
  b.insert(b.end(), bytes, bytes + sizeof ref);
  if (b.size() >= kBatchBytes) {
    spool_.append(cpu, b.data(), b.size());
    b.clear();
  }
}

void EntryStacks::flush() {
  for (std::uint32_t cpu = 0; cpu < batches_.size(); ++cpu) {
    if (!batches_[cpu].empty()) spool_.append(cpu, batches_[cpu].data(), batches_[cpu].size());
    batches_[cpu].clear();
  }
}

// One CPU's refs, chunk after chunk: in the order its ring held them, the TSC's.
struct EntryStacks::Matcher::Stream {
  std::vector<std::pair<const std::uint8_t*, std::uint64_t>> pieces;
  std::size_t piece = 0;
  std::uint64_t at = 0;
  bool peek(Ref& out) const {
    if (piece >= pieces.size()) return false;
    std::memcpy(&out, pieces[piece].first + at, sizeof out);
    return true;
  }
  void pop() {
    at += sizeof(Ref);
    if (at + sizeof(Ref) > pieces[piece].second) ++piece, at = 0;
  }
};

EntryStacks::Matcher::Matcher(const EntryStacks& stacks, std::uint32_t first_id)
    : stacks_(stacks), first_id_(first_id), size_(stacks.spool().size()) {
  if (!size_) return;
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, stacks.spool().fd(), 0);
  if (m == MAP_FAILED) throw Error::from_errno("cannot map the stacks' spool");
  map_ = static_cast<const std::uint8_t*>(m);
  for (const auto& c : stacks.spool().chunks()) {
    if (c.bytes < sizeof(Ref) || c.bytes % sizeof(Ref)) continue;  // ours: never
    if (cpus_.size() <= c.cpu) cpus_.resize(c.cpu + 1);
    cpus_[c.cpu].pieces.emplace_back(map_ + c.offset, c.bytes);
  }
}

EntryStacks::Matcher::~Matcher() {
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
}

// Every snapshot taken up to `tsc`, oldest first, waits for its entry.
void EntryStacks::Matcher::advance(std::uint64_t tsc) {
  for (;;) {
    Stream* oldest = nullptr;
    Ref head, best;
    for (Stream& s : cpus_) {
      if (s.peek(head) && head.tsc <= tsc && (!oldest || head.tsc < best.tsc)) {
        oldest = &s;
        best = head;
      }
    }
    if (!oldest) return;
    oldest->pop();
    pending_[{best.tp, best.sp_id}] = {best.stack, static_cast<int>(best.why)};
  }
}

void EntryStacks::Matcher::on_record(const jump::CallRecord& r, record::Event& e) {
  advance(r.tsc);
  std::pair<std::uint64_t, std::uint64_t> key{r.tp, sp_id(r.sp, r.id)};
  if (!r.exit) return take(key, e);
  if (auto it = pending_.find(key); it != pending_.end()) pending_.erase(it);
}

void EntryStacks::Matcher::on_stopped_entry(record::Event& e) {
  advance(e.tsc);
  take({static_cast<std::uint32_t>(e.tid) | kStoppedTp, sp_id(e.sp, e.probe)}, e);
}

void EntryStacks::Matcher::take(std::pair<std::uint64_t, std::uint64_t> key, record::Event& e) {
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    e.no_stack = record::StackMissing::lost;
  } else if (std::uint32_t k = it->second.first; k && k <= stacks_.distinct().size()) {
    e.stack = first_id_ + k - 1;
    ++tally_.with_stack;
    tally_.truncated += stacks_.distinct()[k - 1].truncated;
  } else {
    e.no_stack = static_cast<record::StackMissing>(it->second.second);
  }
  if (it != pending_.end()) pending_.erase(it);
  if (e.no_stack != record::StackMissing::none) ++tally_.without[e.no_stack];
}

}  // namespace probecost::trace_run
