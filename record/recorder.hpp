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
// so the file is complete on every way out.
#include <memory>
#include <string>

#include "record/output.hpp"
#include "record/pairing.hpp"
#include "record/summary.hpp"

namespace probecost::record {

enum class Format { chrome, ctf };

// --format's value ("" when not given): chrome when PATH ends in .json, ctf otherwise. Throws
// UsageError for another value.
Format choose_format(const std::string& flag, const std::string& path);

class Recorder {
 public:
  // Throws UsageError for a bad run (arg_count out of 0..6, no clock), Error when the output
  // cannot be created.
  Recorder(const RunInfo& run, Format format, const std::string& path);
  // With a writer of the caller's (tests).
  Recorder(const RunInfo& run, std::unique_ptr<Output> writer);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Throws Error for an event of a probe the run does not have.
  void add(const Event& e);
  void thread_name(std::int32_t pid, std::int32_t tid, const std::string& name, std::uint64_t tsc);
  void process_name(std::int32_t pid, const std::string& name);
  void lost(const Lost& l);
  void thread_exited(std::int32_t pid, std::int32_t tid);
  // Idempotent. Throws Error when the file could not be written.
  void finish();

  const Summary& summary() const { return summary_; }
  std::size_t open_frames() const { return pairing_.open_frames(); }

 private:
  class Fanout;
  RunInfo run_;
  std::unique_ptr<Output> writer_;
  Summary summary_;
  std::unique_ptr<Fanout> fanout_;
  Pairing pairing_;
  bool finished_ = false;
};

}  // namespace probecost::record
