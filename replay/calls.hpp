#pragma once
// A recording's calls, kept per thread and put in tree order: each call before the calls it
// made, which follow it nested in its span. What replay's tree and report both walk.
//
// A call nests in another of its thread when it starts within the other's span and ends by
// its end. A call that never returned (End::unmatched) has an unknown end, never guessed: it
// holds no calls, and what came after it is its sibling.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "replay/recording.hpp"

namespace probecost::replay {

struct Stored {
  std::int64_t start_ns = 0, end_ns = 0;
  std::uint64_t ret = 0;
  std::uint32_t function = 0;
  std::uint32_t seq = 0;  // the order it was read in: its arguments' place
  End end = End::returned;
  std::uint16_t why = 0;  // unmatched: Collected::reasons()'s index
};

struct Thread {
  std::int32_t pid = 0, tid = 0;
  std::string name;
  std::vector<Stored> calls;
  std::vector<std::uint64_t> args;  // arg_count per call, by seq
  std::uint64_t lost = 0;
};

class Collected : public Sink {
 public:
  explicit Collected(bool keep_args) : keep_args_(keep_args) {}

  void start(TraceFormat f) override { format_ = f; }
  void function(std::uint32_t index, const std::string& name) override;
  void arg_count(int n) override { arg_count_ = keep_args_ ? n : 0; }
  void call(const Call& c) override;
  void thread_name(std::int32_t pid, std::int32_t tid, const std::string& name) override;
  void process_name(std::int32_t pid, const std::string& name) override;
  void lost(std::int32_t pid, std::int32_t tid, std::uint64_t count) override;
  void marker(std::int32_t, std::int32_t, const std::string& name) override { ++markers_[name]; }

  // Every thread's calls in tree order; once, after the reading.
  void sort();

  TraceFormat format() const { return format_; }
  int arg_count() const { return arg_count_; }
  const std::vector<std::string>& functions() const { return functions_; }
  const std::string& reason(std::uint16_t i) const { return reasons_.at(i); }
  // By process and thread.
  const std::map<std::pair<std::int32_t, std::int32_t>, Thread>& threads() const {
    return threads_;
  }
  const std::string& process_name(std::int32_t pid) const;
  std::uint64_t lost_total() const { return lost_; }
  // The first call's start: times in a range are from it.
  std::int64_t first_ns() const { return first_ns_; }
  std::uint64_t calls() const { return calls_; }
  // The hits of each marker that is no part of a call.
  const std::map<std::string, std::uint64_t>& markers() const { return markers_; }

 private:
  Thread& thread(std::int32_t pid, std::int32_t tid);
  bool keep_args_;
  TraceFormat format_ = TraceFormat::chrome;
  int arg_count_ = 0;
  std::vector<std::string> functions_, reasons_;
  std::map<std::pair<std::int32_t, std::int32_t>, Thread> threads_;
  Thread* last_ = nullptr;  // the thread of the last call (std::map's nodes stay put)
  std::map<std::int32_t, std::string> process_names_;
  std::map<std::string, std::uint64_t> markers_;
  std::uint64_t lost_ = 0, calls_ = 0;
  std::int64_t first_ns_ = INT64_MAX;
};

// Whether `inner` nests in `outer` (same thread, both in tree order).
bool nests(const Stored& outer, const Stored& inner);

// Walks a thread's calls in tree order: v.open(call, depth, holds) as each call starts (holds:
// the next call nests in it) and v.close(call, depth, child_ns) after the calls it holds
// (child_ns: their time, for its self time).
template <typename Visitor>
void walk(const Thread& t, Visitor& v) {
  struct Open {
    const Stored* call;
    std::int64_t child_ns;
  };
  std::vector<Open> stack;
  auto close_top = [&] {
    Open top = stack.back();
    stack.pop_back();
    v.close(*top.call, static_cast<int>(stack.size()), top.child_ns);
    if (!stack.empty() && top.call->end != End::unmatched && top.call->end != End::orphan)
      stack.back().child_ns += top.call->end_ns - top.call->start_ns;
  };
  for (std::size_t i = 0; i < t.calls.size(); ++i) {
    const Stored& c = t.calls[i];
    while (!stack.empty() && !nests(*stack.back().call, c)) close_top();
    bool holds = i + 1 < t.calls.size() && nests(c, t.calls[i + 1]);
    v.open(c, static_cast<int>(stack.size()), holds);
    stack.push_back({&c, 0});
  }
  while (!stack.empty()) close_top();
}

}  // namespace probecost::replay
