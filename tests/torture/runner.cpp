#include "runner.hpp"

#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include "proc.hpp"
#include "run_capture.hpp"
#include "tracer/os/proc_files.hpp"
#include "uprobe/uprobe.hpp"

namespace torture {

using fault::after;
using fault::Deadline;

namespace {

int code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Output captured in memory: no pipe to fill up, nothing to drain while waiting.
using probecost::test::MemFile;

// The file probecost writes its report to, in a directory of its own, removed afterwards.
class ReportFile {
 public:
  ReportFile() {
    char dir[] = "/tmp/torture-XXXXXX";
    if (::mkdtemp(dir)) dir_ = dir;
    path_ = dir_ + "/report.json";
  }
  ~ReportFile() {
    ::unlink(path_.c_str());
    ::unlink(trace_path().c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string trace_path() const { return dir_ + "/trace.json"; }  // record's trace
  std::optional<nlohmann::json> read() const {
    std::ifstream in(path_);
    if (!in) return std::nullopt;
    try {
      return nlohmann::json::parse(in);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

 private:
  std::string dir_, path_;
};

std::vector<std::thread>& removers() {
  static std::vector<std::thread> threads;
  return threads;
}

// The kernel's uprobe at each offset of the file, counting on every thread of `pid` as it is
// now (compare's counters: one perf event per site and thread, no BPF).
class KernelCounts {
 public:
  KernelCounts(const std::string& path, const std::vector<std::uint64_t>& offsets, pid_t pid)
      : path_(path), counters_(std::make_unique<probecost::UprobeCounters>()) {
    if (offsets.empty()) return;
    probecost::UprobePmu pmu = probecost::uprobe_pmu();
    if (pmu.type < 0) {
      skipped = pmu.unavailable;
      return;
    }
    auto tids = probecost::task_ids(pid);
    for (std::uint64_t off : offsets) {
      fds_.emplace_back();
      for (pid_t tid : tids) {
        int fd = counters_->open(pmu.type, path_, off, tid);
        if (fd < 0) {
          skipped = "offset " + std::to_string(off) + ": " + probecost::uprobe_refusal(-fd);
          fds_.clear();
          return;
        }
        fds_.back().push_back(fd);
      }
    }
  }
  std::vector<std::uint64_t> read() const {
    std::vector<std::uint64_t> out;
    for (const auto& per_thread : fds_) {
      std::uint64_t n = 0;
      for (int fd : per_thread) n += probecost::UprobeCounters::read(fd);
      out.push_back(n);
    }
    return out;
  }
  // Closing the events removes the uprobes, slowly: a thread does it while the suite goes on.
  ~KernelCounts() {
    removers().emplace_back([c = std::move(counters_)]() mutable { c.reset(); });
  }
  KernelCounts(const KernelCounts&) = delete;
  KernelCounts& operator=(const KernelCounts&) = delete;
  std::string skipped;

 private:
  std::string path_;
  std::unique_ptr<probecost::UprobeCounters> counters_;
  std::vector<std::vector<int>> fds_;  // per offset, per thread
};

// An attach-mode program, started and waited for until it says "parked" on fd 3; released by a
// line on its stdin.
struct Parked {
  fault::Pipe in, ctl;
  MemFile out, err;
  fault::Child child;
  bool parked = false;

  Parked(const Config& cfg, const Program& p) {
    fault::SpawnFds fds;
    fds.in = in.read;
    fds.out = out.fd;
    fds.err = err.fd;
    fds.ctl = ctl.write;
    child = fault::Child({cfg.corpus_dir + "/torture_" + p.name}, fds);
    in.close_read();
    ctl.close_write();
    fault::LineReader lines(ctl.read);
    while (auto line = lines.next(after(cfg.timeout))) {
      if (*line == "parked") {
        parked = true;
        break;
      }
    }
  }
  void release() {
    [[maybe_unused]] ssize_t n = ::write(in.write, "\n", 1);
    in.close_write();
  }
  void finish(Ended& e, Deadline deadline) {
    auto status = child.wait(deadline);
    if (!status) child.kill();
    if (status) e.code = code_of(*status);
    e.out = out.contents();
    e.err = err.contents();
  }
};

std::string program_path(const Config& cfg, const Program& p) {
  return cfg.corpus_dir + "/torture_" + p.name;
}

Reference launched_reference(const Config& cfg, const Program& p,
                             const std::vector<std::uint64_t>& offsets) {
  Reference r;
  MemFile out, err;
  fault::SpawnFds fds;
  fds.out = out.fd;
  fds.err = err.fd;
  fds.stop_before_exec = true;
  std::string path = program_path(cfg, p);
  fault::Child child({path}, fds);
  if (!child.wait_stopped(after(cfg.timeout))) return r;
  // The events are bound to the task; the uprobe goes into the program's text when the exec
  // maps the file.
  KernelCounts counts(path, offsets, child.pid());
  child.signal(SIGCONT);
  auto status = child.wait(after(cfg.timeout));
  if (!status) child.kill();
  if (status) r.code = code_of(*status);
  r.out = out.contents();
  r.err = err.contents();
  r.uprobe_skipped = counts.skipped;
  if (counts.skipped.empty()) r.counts = counts.read();
  return r;
}

Reference attached_reference(const Config& cfg, const Program& p,
                             const std::vector<std::uint64_t>& offsets) {
  Reference r;
  Parked target(cfg, p);
  if (!target.parked) {
    target.finish(r, after(0));
    return r;
  }
  KernelCounts counts(program_path(cfg, p), offsets, target.child.pid());
  target.release();
  target.finish(r, after(cfg.timeout));
  r.uprobe_skipped = counts.skipped;
  if (counts.skipped.empty()) r.counts = counts.read();
  return r;
}

// The report at argv[5] either way: trace's JSON, or record's summary (its trace beside it).
std::vector<std::string> probecost_argv(const Config& cfg, const ReportFile& report,
                                        const std::vector<std::string>& args) {
  std::vector<std::string> argv = {cfg.probecost, "trace", "-f", "json", "-o", report.path()};
  auto rest = args.begin();
  if (!args.empty() && args.front() == "record") {
    argv = {cfg.probecost, "record", "-o", report.trace_path(), "--summary-json", report.path()};
    ++rest;
  }
  argv.insert(argv.end(), rest, args.end());
  return argv;
}

Traced launched_traced(const Config& cfg, const Program& p, const std::vector<std::string>& args) {
  Traced t;
  ReportFile report;
  t.argv = probecost_argv(cfg, report, args);
  t.argv.insert(t.argv.end(), {"-q", "--", program_path(cfg, p)});
  MemFile out, err;
  fault::SpawnFds fds;
  fds.out = out.fd;
  fds.err = err.fd;
  fault::Child probecost(t.argv, fds);
  auto status = probecost.wait(after(cfg.timeout));
  if (!status) probecost.kill();
  t.target.out = out.contents();
  t.target.err = t.probecost_err = err.contents();
  t.report = report.read();
  if (status) t.probecost_code = code_of(*status);
  // probecost exits with the command's status; the report says it too.
  if (t.report && t.report->contains("command_status"))
    t.target.code = (*t.report)["command_status"].get<int>();
  else
    t.target.code = t.probecost_code;
  t.argv[5] = "REPORT.json";
  return t;
}

Traced attached_traced(const Config& cfg, const Program& p, const std::vector<std::string>& args) {
  Traced t;
  ReportFile report;
  Parked target(cfg, p);
  t.argv = probecost_argv(cfg, report, args);
  t.argv.insert(t.argv.end(), {"-p", std::to_string(target.child.pid())});
  fault::Pipe err_pipe;
  MemFile out;
  fault::SpawnFds fds;
  fds.out = out.fd;
  fds.err = err_pipe.write;
  fault::Child probecost(t.argv, fds);
  err_pipe.close_write();
  // The probes are in once it says "tracing process"; if it refuses, its stderr ends first.
  fault::LineReader err(err_pipe.read);
  while (auto line = err.next(after(cfg.timeout))) {
    if (line->find("tracing process") != std::string::npos) break;
  }
  target.release();
  target.finish(t.target, after(cfg.timeout));
  auto status = probecost.wait(after(cfg.timeout));
  if (!status) probecost.kill();
  while (err.next(after(1))) {
  }
  t.probecost_err = err.seen();
  if (status) t.probecost_code = code_of(*status);
  t.report = report.read();
  t.argv[5] = "REPORT.json";
  t.argv.back() = "PID_OF_PARKED";
  return t;
}

}  // namespace

void wait_for_uprobe_removal() {
  for (auto& t : removers()) t.join();
  removers().clear();
}

Reference run_reference(const Config& cfg, const Program& p,
                        const std::vector<std::uint64_t>& offsets) {
  return p.attach ? attached_reference(cfg, p, offsets) : launched_reference(cfg, p, offsets);
}

Traced run_traced(const Config& cfg, const Program& p, const std::vector<std::string>& args) {
  return p.attach ? attached_traced(cfg, p, args) : launched_traced(cfg, p, args);
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) {
    bool plain = a.find_first_of(" '\"$\\*?;&|<>()") == std::string::npos && !a.empty();
    line += (line.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return line;
}

}  // namespace torture
