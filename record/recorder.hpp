#pragma once
// The output side of `probecost record`: the tracer side feeds it decoded events and metadata;
// it pairs calls per thread, writes the trace file as it goes (--format chrome or ctf) and keeps
// the summary.
//
//   record::Recorder rec(run, record::choose_format(format_flag, path), path);
//   rec.thread_name(pid, tid, "worker", tsc);
//   rec.add(event);   // millions of times, threads interleaved, each thread in time order
//   rec.finish();     // open calls become unmatched; the file is closed
//   rec.summary().print(std::cerr);
//
// The destructor finishes a recording that was not finished (an exception, an interrupted run),
// so the file is complete on every way out. A writer that fails (a full disk, EIO) is written to
// no more, but the summary goes on counting every event: finish() then throws the writer's
// first error, and the summary is whole all the same.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/names.hpp"
#include "record/format.hpp"
#include "record/markers.hpp"
#include "record/output.hpp"
#include "record/pairing.hpp"
#include "record/summary.hpp"

namespace probecost::record {

// --format's value ("" when not given) wins. Without it, by the path, as the file system has it
// now: an existing directory, or a name ending in '/', is a CTF trace; anything else (a name
// ending in .json, any other name, a FIFO, a character device such as /dev/null) Chrome JSON.
// Throws UsageError for another value.
TraceFormat choose_format(const std::string& flag, const std::string& path);
const char* format_name(TraceFormat format);

class Recorder {
 public:
  // Throws Error for a bad run (arg_count out of 0..6, no clock: the command line refuses a bad
  // --args first) or when the output cannot be created.
  Recorder(const RunInfo& run, TraceFormat format, const std::string& path);
  // With a writer of the caller's (tests).
  Recorder(const RunInfo& run, std::unique_ptr<Output> writer);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Throws Error for an event of a probe the run does not have.
  void add(const Event& e);
  // The id of `text` for a marker's argument (Event::text), the writers told of it the first
  // time. Past kMaxStringBytes of distinct strings, a new one is kept as kStringsFull's id.
  std::uint32_t intern(const std::string& text);
  static constexpr std::size_t kMaxStringBytes = 64 << 20;
  static constexpr const char* kStringsFull = "(not kept: 64 MiB of distinct strings)";
  void thread_name(std::int32_t pid, std::int32_t tid, const std::string& name, std::uint64_t tsc);
  void process_name(std::int32_t pid, const std::string& name);
  void lost(const Lost& l);
  // Stack `id`'s frames (Output::stack), before any event names it.
  void stack(std::uint32_t id, const std::vector<std::string>& frames);
  // Probe `probe`'s exits as planned, `tail` of them tail calls (marked in the summary).
  void exits(std::uint32_t probe, std::uint32_t all, std::uint32_t tail);
  void thread_exited(std::int32_t pid, std::int32_t tid);
  // Idempotent. Throws Error when the file could not be written (at any time of the run).
  void finish();
  // The writer's first failure, "" while it has none.
  const std::string& write_error() const { return write_error_; }

  const Summary& summary() const { return summary_; }
  std::size_t open_frames() const { return pairing_.open_frames() + markers_.open_entries(); }

 private:
  class Fanout;
  class Guard;
  RunInfo run_;
  std::unique_ptr<Output> writer_;
  std::string write_error_;
  std::unique_ptr<Guard> guard_;
  Summary summary_;
  std::unique_ptr<Fanout> fanout_;
  Pairing pairing_;
  MarkerPairing markers_;
  std::unordered_map<std::string, std::uint32_t> strings_;
  std::size_t string_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace probecost::record
