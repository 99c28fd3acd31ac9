#include "record/recorder.hpp"

#include <sys/stat.h>

#include "common/error.hpp"
#include "record/chrome.hpp"
#include "record/ctf.hpp"

namespace probecost::record {

// What the pairing closes goes to the writer and the summary alike.
class Recorder::Fanout : public Output {
 public:
  Fanout(Output& writer, Output& summary) : a_(writer), b_(summary) {}
  void call(const Event& entry, const Event& end) override {
    a_.call(entry, end);
    b_.call(entry, end);
  }
  void unmatched(const Event& entry, Unmatched why) override {
    a_.unmatched(entry, why);
    b_.unmatched(entry, why);
  }
  void orphan(const Event& end) override {
    a_.orphan(end);
    b_.orphan(end);
  }
  void instant(const Event& e) override {
    a_.instant(e);
    b_.instant(e);
  }

 private:
  Output& a_;
  Output& b_;
};

// The writer, written to until it fails: then no more (its file is broken, and goes), while the
// pairing and the summary go on.
class Recorder::Guard : public Output {
 public:
  Guard(Output& writer, std::string& error) : w_(writer), error_(error) {}
  void event(const Event& e) override {
    run([&] { w_.event(e); });
  }
  void call(const Event& entry, const Event& end) override {
    run([&] { w_.call(entry, end); });
  }
  void unmatched(const Event& entry, Unmatched why) override {
    run([&] { w_.unmatched(entry, why); });
  }
  void orphan(const Event& end) override {
    run([&] { w_.orphan(end); });
  }
  void instant(const Event& e) override {
    run([&] { w_.instant(e); });
  }
  void string(std::uint32_t id, const std::string& text) override {
    run([&] { w_.string(id, text); });
  }
  void thread_name(std::int32_t pid, std::int32_t tid, const std::string& name,
                   std::uint64_t tsc) override {
    run([&] { w_.thread_name(pid, tid, name, tsc); });
  }
  void process_name(std::int32_t pid, const std::string& name) override {
    run([&] { w_.process_name(pid, name); });
  }
  void lost(const Lost& l) override {
    run([&] { w_.lost(l); });
  }
  void thread_exited(std::int32_t pid, std::int32_t tid) override {
    run([&] { w_.thread_exited(pid, tid); });
  }
  void stack(std::uint32_t id, const std::vector<std::string>& frames) override {
    run([&] { w_.stack(id, frames); });
  }
  void finish() override {
    run([&] { w_.finish(); });
  }

 private:
  template <typename F>
  void run(F&& f) {
    if (!error_.empty()) return;
    try {
      f();
    } catch (const Error& e) {
      error_ = e.what();
    }
  }
  Output& w_;
  std::string& error_;
};

namespace {

const RunInfo& checked(const RunInfo& run) {
  if (run.arg_count < 0 || run.arg_count > kMaxArgs)
    throw Error("record: " + std::to_string(run.arg_count) + " arguments asked for: from 0 to " +
                std::to_string(kMaxArgs) + " (the integer argument registers)");
  if (run.clock.hz == 0) throw Error("record: the TSC clock is not calibrated");
  return run;
}

std::unique_ptr<Output> make_writer(const RunInfo& run, TraceFormat format,
                                    const std::string& path) {
  if (format == TraceFormat::chrome) return std::make_unique<ChromeWriter>(path, run);
  return std::make_unique<CtfWriter>(path, run);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

const char* stack_missing_text(StackMissing why) {
  switch (why) {
    case StackMissing::none:
      return "";
    case StackMissing::lost:
      return "lost: no snapshot kept (its ring was full: the unwinding fell behind)";
    case StackMissing::unknown_thread:
      return "not copied: a thread whose stack could not be bounded";
    case StackMissing::off_stack:
      return "not copied: off its thread's stack (a sigaltstack, a coroutine)";
    case StackMissing::direction_flag:
      return "not copied: the direction flag set at the entry";
    case StackMissing::not_unwound:
      return "not unwound: no frame found in the copy";
    case StackMissing::int3:
      return "none: an int3 serves this entry and the process has no snapshot buffer";
  }
  return "unknown";
}

TraceFormat choose_format(const std::string& flag, const std::string& path) {
  if (auto f = kTraceFormatNames.find(flag)) return *f;
  if (!flag.empty()) throw UsageError("--format " + flag + ": " + kTraceFormatNames.known());
  if (ends_with(path, "/")) return TraceFormat::ctf;
  struct stat st;
  if (!ends_with(path, ".json") && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return TraceFormat::ctf;
  return TraceFormat::chrome;
}

const char* format_name(TraceFormat format) {
  return kTraceFormatNames.name(format);
}

Recorder::Recorder(const RunInfo& run, TraceFormat format, const std::string& path)
    : Recorder(run, make_writer(checked(run), format, path)) {}

Recorder::Recorder(const RunInfo& run, std::unique_ptr<Output> writer)
    : run_(checked(run)),
      writer_(std::move(writer)),
      guard_(std::make_unique<Guard>(*writer_, write_error_)),
      summary_(run_),
      fanout_(std::make_unique<Fanout>(*guard_, summary_)),
      pairing_(*fanout_, Pairing::kMaxDepth, run_.arg_count),
      markers_(run_, *fanout_) {}

Recorder::~Recorder() {
  try {
    finish();
  } catch (...) {
    // A destructor cannot report it; finish() does.
  }
}

void Recorder::add(const Event& e) {
  if (e.probe >= run_.probes.size())
    throw Error("record: an event of probe " + std::to_string(e.probe) + ", but the run has " +
                std::to_string(run_.probes.size()));
  guard_->event(e);
  summary_.event(e);
  if (e.kind == EventKind::marker)
    markers_.add(e);
  else
    pairing_.add(e);
}

std::uint32_t Recorder::intern(const std::string& text) {
  if (auto it = strings_.find(text); it != strings_.end()) return it->second;
  if (string_bytes_ + text.size() > kMaxStringBytes && text != kStringsFull)
    return intern(kStringsFull);
  auto id = static_cast<std::uint32_t>(strings_.size());
  strings_.emplace(text, id);
  string_bytes_ += text.size();
  guard_->string(id, text);
  return id;
}

void Recorder::thread_name(std::int32_t pid, std::int32_t tid, const std::string& name,
                           std::uint64_t tsc) {
  guard_->thread_name(pid, tid, name, tsc);
}

void Recorder::process_name(std::int32_t pid, const std::string& name) {
  guard_->process_name(pid, name);
}

void Recorder::lost(const Lost& l) {
  if (l.probe != kAnyProbe && l.probe >= run_.probes.size())
    throw Error("record: records lost of probe " + std::to_string(l.probe) + ", but the run has " +
                std::to_string(run_.probes.size()));
  guard_->lost(l);
  summary_.lost(l);
}

void Recorder::stack(std::uint32_t id, const std::vector<std::string>& frames) {
  guard_->stack(id, frames);
}

void Recorder::exits(std::uint32_t probe, std::uint32_t all, std::uint32_t tail) {
  if (probe < run_.probes.size()) summary_.exits(probe, all, tail);
}

void Recorder::thread_exited(std::int32_t pid, std::int32_t tid) {
  pairing_.thread_exited(pid, tid);
  markers_.thread_exited(pid, tid);
  guard_->thread_exited(pid, tid);
}

void Recorder::finish() {
  if (finished_) return;
  finished_ = true;
  pairing_.finish();
  markers_.finish();
  guard_->finish();
  if (!write_error_.empty()) throw Error(write_error_);
}

}  // namespace probecost::record
