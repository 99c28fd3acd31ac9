#include "trace/call_drain.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "common/error.hpp"

namespace probecost::trace_run {

// An unlinked file in `dir`: O_TMPFILE where the file system has it, else a name removed at once.
Fd spool_file(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return Fd(fd);
  std::string name = dir + "/.probecost-spool-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0)
    throw Error::from_errno("cannot make the record spool in " + dir +
                            " (the raw records, kept until the trace is written)");
  ::unlink(name.c_str());
  return Fd(fd);
}

namespace {

double thread_cpu_now() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

CallSpool::CallSpool(const std::string& dir, std::uint32_t record_size, std::uint32_t max_ids,
                     Kind kind, std::uint64_t limit, SpoolIo io)
    : dir_(dir),
      writer_(spool_file(dir), io),
      record_size_(record_size),
      kind_(kind),
      limit_(limit),
      not_kept_(max_ids + 1),
      not_kept_exits_(max_ids + 1) {}

// Records not kept: counted by their probe id (the tracee wrote the ids: any out of range
// counts in the last slot).
void CallSpool::refuse(const std::uint8_t* data, std::size_t bytes) {
  for (std::size_t at = 0; at + record_size_ <= bytes; at += record_size_) {
    std::int64_t id;
    bool exit = false;
    if (kind_ == Kind::Calls) {
      id = jump::call_record_id(data + at);
      if (id < 0) continue;  // a sync: no call's
      std::uint64_t word;
      std::memcpy(&word, data + at, 8);
      exit = (word & jump::kEventExitBit) != 0;
    } else {
      std::uint64_t word;
      std::memcpy(&word, data + at + 16, 8);
      id = static_cast<std::int64_t>((word >> jump::kIdShift) & (jump::kMaxCallIds - 1));
    }
    ++(exit ? not_kept_exits_
            : not_kept_)[std::min(static_cast<std::size_t>(id), not_kept_.size() - 1)];
  }
}

void CallSpool::append(std::uint32_t cpu, const std::uint8_t* data, std::size_t bytes) {
  if (!error_.empty()) return refuse(data, bytes);
  std::uint64_t at = SpoolWriter::place(data, bytes, size_);
  if (at + bytes > limit_) {
    error_ = "the spool reached its bound of " + std::to_string(limit_ >> 20) + " MiB";
    return refuse(data, bytes);
  }
  std::string why;
  if (!writer_.write(data, bytes, at, why)) {
    error_ = "the spool in " + dir_ + " could not be written after " + std::to_string(size_ >> 20) +
             " MiB (" + why + ")";
    // Cut back to the last whole piece (the file's bytes past it are no records of ours; the
    // chunks, which are what is read, end there either way).
    if (::ftruncate(writer_.fd(), static_cast<off_t>(size_)) != 0) error_ += "; not cut back";
    return refuse(data, bytes);
  }
  chunks_.push_back({cpu, at, bytes});
  size_ = at + bytes;
}

CallDrain::CallDrain(jump::CallReader& reader, CallSpool& spool, const Options& options)
    : reader_(reader), spool_(spool), options_(options) {
  if (!options_.writers_syscall) options_.block = false;
  reader_.set_blocking(options_.block, options_.wait_bound_ns);
  thread_ = std::thread([this] { run(); });
}

CallDrain::~CallDrain() {
  try {
    finish();
  } catch (...) {
  }
}

std::uint64_t CallDrain::pass(bool final) {
  ++passes_;
  std::uint64_t n = reader_.poll(
      __rdtsc(), final, [this](std::uint32_t cpu, const std::uint8_t* data, std::size_t bytes) {
        spool_.append(cpu, data, bytes);
      });
  bytes_ += n;
  if (options_.live) publish(n);
  return n;
}

void CallDrain::publish(std::uint64_t bytes) {
  LiveCounts& live = *options_.live;
  live.bytes.fetch_add(bytes, std::memory_order_relaxed);
  live.records.fetch_add(bytes / std::max<std::uint32_t>(spool_.record_size(), 1),
                         std::memory_order_relaxed);
  std::uint64_t lost = reader_.lost_total();
  if (lost > lost_seen_) live.lost.fetch_add(lost - lost_seen_, std::memory_order_relaxed);
  lost_seen_ = std::max(lost_seen_, lost);
}

// Nothing to copy: sleep until a writer wakes us or the flush interval ends, or, where the
// writers must make no system call, for kPollNs (the `sleeping` word stays 0: no writer wakes).
void CallDrain::idle(std::uint32_t seen) {
  if (options_.writers_syscall) return reader_.wait_for_writers(seen, options_.flush_ns);
  timespec t{0, kPollNs};
  ::nanosleep(&t, nullptr);
}

void CallDrain::run() {
  ::pthread_setname_np(::pthread_self(), "probecost-drain");
  try {
    while (!stop_.load(std::memory_order_acquire)) {
      // The word before the pass: a writer that fills a sub-buffer after this load changes it,
      // and the wait below returns at once.
      std::uint32_t seen = reader_.wake_word();
      std::uint64_t n = pass(false);
      // Blocking on again, each pass (a writer whose wait timed out turned it off).
      if (options_.block && !reader_.blocking()) reader_.set_blocking(true, options_.wait_bound_ns);
      if (!n && !stop_.load(std::memory_order_acquire)) idle(seen);
    }
  } catch (const std::exception& e) {
    // The tracee wrote a head no writer of ours can have: nothing more is read from it, and
    // no writer waits for us again.
    error_ = e.what();
    reader_.set_blocking(false);
  }
  cpu_s_ = thread_cpu_now();
}

void CallDrain::finish() {
  if (finished_) return;
  finished_ = true;
  stop_.store(true, std::memory_order_release);
  reader_.wake_reader();
  thread_.join();
  if (error_.empty()) {
    try {
      pass(true);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  // Nobody reads this buffer again: a writer still inside a trampoline once the process is let
  // go (one parked in its wait when it was stopped) drops rather than waits out the bound.
  reader_.set_blocking(false);
}

}  // namespace probecost::trace_run
