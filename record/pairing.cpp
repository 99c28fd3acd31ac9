#include "record/pairing.hpp"

#include <algorithm>

namespace probecost::record {

namespace {

bool closes(std::uint32_t probe, std::uint64_t sp, const Event& end) {
  return probe == end.probe && (sp == 0 || end.sp == 0 || sp == end.sp);
}

}  // namespace

Pairing::Pairing(Output& out, std::size_t max_depth, int arg_count, std::size_t max_frames)
    : out_(out),
      max_depth_(std::max<std::size_t>(max_depth, 1)),
      args_(static_cast<std::size_t>(std::clamp(arg_count, 0, kMaxArgs))),
      max_frames_(std::max<std::size_t>(max_frames, 1)) {}

std::uint64_t Pairing::key(std::int32_t pid, std::int32_t tid) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)) << 32 |
         static_cast<std::uint32_t>(tid);
}

bool Pairing::Stack::near(std::uint64_t sp) const {
  return !frames.empty() && lo <= hi && sp + kSameStackBytes >= lo && sp <= hi + kSameStackBytes;
}

Event Pairing::entry_of(const Thread& t, const Stack& s, std::size_t i) const {
  const Frame& f = s.frames[i];
  Event e;
  e.kind = EventKind::entry;
  e.probe = f.probe;
  e.pid = t.pid;
  e.tid = t.tid;
  e.tsc = f.tsc;
  e.sp = f.sp;
  if (f.stack >= kNoStack)
    e.no_stack = static_cast<StackMissing>(f.stack - kNoStack);
  else
    e.stack = f.stack;
  std::copy_n(s.args.begin() + static_cast<std::ptrdiff_t>(i * args_), args_, e.args.begin());
  return e;
}

void Pairing::add(const Event& e) {
  if (e.kind == EventKind::entry)
    push(e);
  else
    close(e);
}

// The stack an entry at `sp` runs on: the one the thread last ran on when it is near it (the
// common case: a nested call), else another near one, else an empty one, else a new one.
Pairing::Stack& Pairing::stack_for(Thread& t, std::uint64_t sp) {
  if (t.stacks.empty()) t.stacks.emplace_back();
  if (sp == 0 || t.stacks[t.current].near(sp)) return t.stacks[t.current];
  std::size_t empty = t.stacks.size();
  for (std::size_t i = 0; i < t.stacks.size(); ++i) {
    if (t.stacks[i].near(sp)) return t.stacks[t.current = i];
    if (t.stacks[i].frames.empty() && empty == t.stacks.size()) empty = i;
  }
  if (empty == t.stacks.size()) t.stacks.emplace_back();
  t.current = empty;
  return t.stacks[empty];
}

void Pairing::remove(Thread& t, Stack& s, std::size_t i) {
  s.frames.erase(s.frames.begin() + static_cast<std::ptrdiff_t>(i));
  auto first = s.args.begin() + static_cast<std::ptrdiff_t>(i * args_);
  s.args.erase(first, first + static_cast<std::ptrdiff_t>(args_));
  --t.frames;
  --frames_;
  if (s.frames.empty()) s.lo = UINT64_MAX, s.hi = 0;
}

void Pairing::report(Thread& t, Stack& s, std::size_t i, Unmatched why) {
  out_.unmatched(entry_of(t, s, i), why);
  remove(t, s, i);
}

// A call whose return-address slot is an open frame's: that frame is over (two live frames
// cannot share a slot), and so is every deeper one pushed after it on its stack. The scan goes
// down from the top while the frames are deeper than the new one (lower addresses) and stops
// at the first frame above it, normally the top one: O(1). A handler on a sigaltstack above
// the interrupted frames stops the scan early and is left alone.
void Pairing::drop_reused(Thread& t, Stack& s, std::uint64_t sp) {
  if (sp == 0) return;
  std::size_t i = s.frames.size();
  while (i > 0 && s.frames[i - 1].sp != 0 && s.frames[i - 1].sp < sp) --i;
  if (i == 0 || s.frames[i - 1].sp != sp) return;
  while (s.frames.size() >= i) report(t, s, s.frames.size() - 1, Unmatched::skipped);
}

// The oldest open frame goes: of the stack being pushed, else of the thread's largest, else
// (a thread with none, past the bound of all threads) of the largest thread's largest.
void Pairing::evict(Thread& t, Stack& s) {
  Thread* who = &t;
  if (t.frames == 0) {
    for (auto& [k, other] : threads_) {
      bool larger = other.frames > who->frames ||
                    (other.frames == who->frames && k < key(who->pid, who->tid));
      if (larger) who = &other;
    }
  }
  Stack* from = who == &t && !s.frames.empty() ? &s : nullptr;
  for (Stack& other : who->stacks) {
    if (!from || (from != &s && other.frames.size() > from->frames.size())) from = &other;
  }
  if (from && !from->frames.empty()) report(*who, *from, 0, Unmatched::evicted);
}

void Pairing::push(const Event& entry) {
  Thread& t = threads_[key(entry.pid, entry.tid)];
  t.pid = entry.pid;
  t.tid = entry.tid;
  Stack& s = stack_for(t, entry.sp);
  drop_reused(t, s, entry.sp);
  if (t.frames >= max_depth_ || frames_ >= max_frames_) evict(t, s);
  std::uint32_t stack = entry.stack && entry.stack < kNoStack
                            ? entry.stack
                            : kNoStack + static_cast<std::uint32_t>(entry.no_stack);
  s.frames.push_back({entry.tsc, entry.sp, entry.probe, stack});
  s.args.insert(s.args.end(), entry.args.begin(),
                entry.args.begin() + static_cast<std::ptrdiff_t>(args_));
  if (entry.sp) s.lo = std::min(s.lo, entry.sp), s.hi = std::max(s.hi, entry.sp);
  ++t.frames;
  ++frames_;
}

// The frame `end` closes on stack `k`, if it is there. Those above it that are deeper (lower
// addresses: its callees, unwound past) are unmatched; those above it at higher addresses are
// not its callees (a handler on a sigaltstack above it) and stay open.
bool Pairing::close_in(Thread& t, std::size_t k, const Event& end) {
  Stack& s = t.stacks[k];
  std::size_t m = s.frames.size();
  while (m > 0 && !closes(s.frames[m - 1].probe, s.frames[m - 1].sp, end)) --m;
  if (m == 0) return false;
  --m;
  for (std::size_t j = s.frames.size() - 1; j > m; --j) {
    std::uint64_t sp = s.frames[j].sp;
    if (sp == 0 || end.sp == 0 || sp < end.sp) report(t, s, j, Unmatched::skipped);
  }
  out_.call(entry_of(t, s, m), end);
  remove(t, s, m);
  t.current = k;
  return true;
}

void Pairing::close(const Event& end) {
  auto it = threads_.find(key(end.pid, end.tid));
  if (it == threads_.end() || it->second.stacks.empty()) return out_.orphan(end);
  Thread& t = it->second;
  if (close_in(t, t.current, end)) return;
  // Without its slot an exit can only be the current stack's (a plain per-thread stack).
  if (end.sp != 0) {
    for (std::size_t k = 0; k < t.stacks.size(); ++k) {
      if (k != t.current && close_in(t, k, end)) return;
    }
  }
  out_.orphan(end);
}

void Pairing::drain(Thread& t, Unmatched why) {
  // Innermost first, as the frames would have ended.
  for (Stack& s : t.stacks) {
    while (!s.frames.empty()) report(t, s, s.frames.size() - 1, why);
  }
}

void Pairing::thread_exited(std::int32_t pid, std::int32_t tid) {
  auto it = threads_.find(key(pid, tid));
  if (it == threads_.end()) return;
  drain(it->second, Unmatched::thread_gone);
  threads_.erase(it);
}

void Pairing::finish() {
  // By process and thread, so that the same run writes the same file.
  std::vector<std::uint64_t> keys;
  for (const auto& [k, thread] : threads_) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  for (std::uint64_t k : keys) drain(threads_[k], Unmatched::open_at_end);
  threads_.clear();
}

}  // namespace probecost::record
