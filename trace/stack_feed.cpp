#include "trace/stack_feed.hpp"

#include <pthread.h>
#include <time.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"

namespace probecost::trace_run {

namespace {

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

constexpr long kFlushNs = 100'000'000;  // a partly filled sub-buffer is read after this
constexpr long kPollNs = 1'000'000;     // writers that make no system call: we poll

}  // namespace

StackFeed::StackFeed(jump::CallReader& reader, pid_t pid, const Options& options)
    : reader_(reader),
      pid_(pid),
      options_(options),
      unwinder_(std::make_unique<SnapshotUnwinder>(pid, options.max_depth)) {
  if (!options_.writers_syscall) options_.block = false;
  reader_.set_blocking(options_.block, options_.wait_bound_ns);
  thread_ = std::thread([this] { run(); });
}

StackFeed::~StackFeed() {
  try {
    stop();
  } catch (...) {
  }
}

// Every field of a record is the tracee's: decode_snapshot reads the header once and clamps
// the copy to the slot; SnapshotUnwinder copies each byte out before it reads it.
void StackFeed::take_one(std::uint32_t cpu, const std::uint8_t* record) {
  const std::uint32_t rs = reader_.layout().record_size;
  jump::StackSnapshot s = jump::decode_snapshot({record, rs});
  ++counts_.snapshots;
  if (s.bound != jump::SnapshotBound::Bounded) {
    ++counts_.not_copied[s.bound];
    if (options_.each) options_.each(cpu, s, {});
    return;
  }
  std::lock_guard<std::mutex> hold(unwinder_lock_);
  auto st = unwinder_->unwind(s);
  if (st.truncated) ++counts_.truncated;
  if (!st.truncated && !st.ips.empty())
    ++counts_.needed[std::min<std::uint64_t>((st.needed + 255) / 256, kNeededBuckets - 1)];
  if (!st.ips.empty()) ++counts_.unwound;
  if (options_.each) return options_.each(cpu, s, st);
  if (!st.ips.empty()) ++stacks_[{s.rip, std::move(st.ips)}];
}

void StackFeed::add_stopped(const jump::StackSnapshot& s, std::vector<std::uint8_t> bytes) {
  std::lock_guard<std::mutex> hold(copies_lock_);
  copies_.emplace_back(s, std::move(bytes));
}

void StackFeed::take_stopped() {
  std::vector<std::pair<jump::StackSnapshot, std::vector<std::uint8_t>>> batch;
  {
    std::lock_guard<std::mutex> hold(copies_lock_);
    batch.swap(copies_);
  }
  for (auto& [s, bytes] : batch) {
    s.stack = bytes;
    ++counts_.snapshots;
    std::lock_guard<std::mutex> hold(unwinder_lock_);
    auto st = unwinder_->unwind(s);
    if (!st.ips.empty()) ++counts_.unwound;
    if (st.truncated) ++counts_.truncated;
    if (options_.each) options_.each(stopped_cpu(), s, st);
  }
}

void StackFeed::take(std::uint32_t cpu, const std::uint8_t* data, std::size_t bytes) {
  const std::uint32_t rs = reader_.layout().record_size;
  for (std::size_t at = 0; at + rs <= bytes; at += rs) take_one(cpu, data + at);
}

void StackFeed::refresh() {
  std::unique_ptr<SnapshotUnwinder> fresh;
  try {
    fresh = std::make_unique<SnapshotUnwinder>(pid_, options_.max_depth);
  } catch (const Error&) {
    return;  // the process is gone: its last maps stay
  }
  std::lock_guard<std::mutex> hold(unwinder_lock_);
  unwinder_.swap(fresh);
}

std::uint64_t StackFeed::pass(bool final) {
  return reader_.poll(
      __rdtsc(), final,
      [this](std::uint32_t cpu, const std::uint8_t* d, std::size_t n) { take(cpu, d, n); });
}

void StackFeed::run() {
  ::pthread_setname_np(::pthread_self(), "probecost-stack");
  try {
    while (!stop_.load(std::memory_order_acquire)) {
      // The word before the pass: a writer that fills a sub-buffer after this load changes it,
      // and the wait below returns at once.
      std::uint32_t seen = reader_.wake_word();
      std::uint64_t n = pass(false);
      take_stopped();
      // Blocking on again, each pass (a writer whose wait timed out turned it off).
      if (options_.block && !reader_.blocking()) reader_.set_blocking(true, options_.wait_bound_ns);
      if (n || stop_.load(std::memory_order_acquire)) continue;
      if (options_.writers_syscall) {
        reader_.wait_for_writers(seen, kFlushNs);
      } else {
        timespec t{0, kPollNs};
        ::nanosleep(&t, nullptr);
      }
    }
  } catch (const std::exception& e) {
    // The tracee wrote a head no writer of ours can have: nothing more is read from it, and
    // no writer waits for us again.
    error_ = e.what();
    reader_.set_blocking(false);
  }
  counts_.unwind_s += thread_cpu_s();
}

void StackFeed::stop() {
  if (stopped_) return;
  stopped_ = true;
  stop_.store(true, std::memory_order_release);
  reader_.wake_reader();
  thread_.join();
  if (!error_.empty()) return;
  double t0 = thread_cpu_s();
  try {
    pass(true);
  } catch (const std::exception& e) {
    error_ = e.what();
  }
  take_stopped();
  counts_.unwind_s += thread_cpu_s() - t0;
  // Nobody reads this buffer again: a writer still in a trampoline once the process is let go
  // drops rather than waits out the bound.
  reader_.set_blocking(false);
}

}  // namespace probecost::trace_run
