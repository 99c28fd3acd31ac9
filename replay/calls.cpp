#include "replay/calls.hpp"

#include <algorithm>

namespace probecost::replay {

Thread& Collected::thread(std::int32_t pid, std::int32_t tid) {
  // Calls come in runs of one thread's: the last one's, without a lookup.
  if (last_ && last_->pid == pid && last_->tid == tid) return *last_;
  auto [it, added] = threads_.try_emplace({pid, tid});
  if (added) it->second.pid = pid, it->second.tid = tid;
  last_ = &it->second;
  return it->second;
}

void Collected::function(std::uint32_t index, const std::string& name) {
  if (functions_.size() <= index) functions_.resize(index + 1);
  functions_[index] = name;
}

void Collected::call(const Call& c) {
  Thread& t = thread(c.pid, c.tid);
  Stored s;
  s.start_ns = c.start_ns;
  s.end_ns = c.end == End::unmatched ? c.start_ns : c.end_ns;
  s.ret = c.ret;
  s.function = c.function;
  s.seq = static_cast<std::uint32_t>(t.calls.size());
  s.end = c.end;
  if (c.end == End::unmatched) {
    auto it = std::find(reasons_.begin(), reasons_.end(), c.why);
    s.why = static_cast<std::uint16_t>(it - reasons_.begin());
    if (it == reasons_.end()) reasons_.emplace_back(c.why);
  }
  t.calls.push_back(s);
  t.args.insert(t.args.end(), c.args.begin(), c.args.begin() + arg_count_);
  if (c.end != End::orphan) ++calls_;
  first_ns_ = std::min(first_ns_, c.start_ns);
}

void Collected::thread_name(std::int32_t pid, std::int32_t tid, const std::string& name) {
  thread(pid, tid).name = name;
}

void Collected::process_name(std::int32_t pid, const std::string& name) {
  process_names_[pid] = name;
}

const std::string& Collected::process_name(std::int32_t pid) const {
  static const std::string none;
  auto it = process_names_.find(pid);
  return it == process_names_.end() ? none : it->second;
}

void Collected::lost(std::int32_t pid, std::int32_t tid, std::uint64_t count) {
  lost_ += count;
  if (tid != 0) thread(pid, tid).lost += count;
}

bool nests(const Stored& outer, const Stored& inner) {
  if (outer.end == End::unmatched || outer.end == End::orphan) return false;
  return inner.start_ns >= outer.start_ns && inner.start_ns < outer.end_ns &&
         inner.end_ns <= outer.end_ns;
}

void Collected::sort() {
  // By start; of two that start together the longer holds the other; of two with one span the
  // one closed later (record closes a call after the calls it made).
  auto before = [](const Stored& a, const Stored& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
    return a.seq > b.seq;
  };
  for (auto& [key, t] : threads_) std::sort(t.calls.begin(), t.calls.end(), before);
}

}  // namespace probecost::replay
