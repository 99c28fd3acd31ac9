// probecost record (-p PID | -- COMMAND ARGS...) -b PROBE [-b PROBE ...] -o PATH [options]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "cli/parse.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "common/tsc.hpp"
#include "record/recorder.hpp"
#include "trace/report.hpp"
#include "trace/trace.hpp"
#include "tracer/wait_status.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

// A CTF trace's directory: new (its parent writable), or empty, on storage.
void check_ctf_dir(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = path;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec))
      throw UsageError("-o " + path + ": not a directory (a CTF trace is one: give a new path)");
    if (!fs::is_empty(dir, ec))
      throw UsageError("-o " + path +
                       ": exists and is not empty: a CTF trace needs a directory of its own");
  } else {
    dir = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError("-o " + path + ": cannot write in " + dir.string());
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const char* kernel = fd >= 0 ? kernel_file_system(fd) : nullptr;
  if (fd >= 0) ::close(fd);
  if (kernel)
    throw UsageError("-o " + path + ": " + dir.string() + " is on the kernel's " + kernel +
                     " file system (give a directory on storage)");
}

// A CTF directory this run made or filled: on a failure, what the run put there goes (the whole
// directory when it made it), so that no half trace (an empty `metadata`) is left behind.
class CtfDirGuard {
 public:
  explicit CtfDirGuard(const std::string& path) : path_(path) {
    std::error_code ec;
    existed_ = std::filesystem::exists(path_, ec);
  }
  ~CtfDirGuard() {
    if (kept_) return;
    std::error_code ec;
    if (!existed_) {
      std::filesystem::remove_all(path_, ec);
      return;
    }
    for (const auto& e : std::filesystem::directory_iterator(path_, ec))
      std::filesystem::remove_all(e.path(), ec);  // it was empty (check_ctf_dir)
  }
  CtfDirGuard(const CtfDirGuard&) = delete;
  CtfDirGuard& operator=(const CtfDirGuard&) = delete;
  void keep() { kept_ = true; }

 private:
  std::filesystem::path path_;
  bool existed_ = false;
  bool kept_ = false;
};

// The trace's place, found out now, before anything is touched: a Chrome JSON file opened and
// held (a FIFO's reader stays connected until the recorder opens it by its path; a file this
// run created is removed if the run fails), or a CTF directory (removed, or emptied, likewise).
struct TracePlace {
  std::optional<Output> file;
  std::optional<CtfDirGuard> dir;

  TracePlace(const std::string& path, record::Format format) {
    if (path.empty()) throw UsageError("no output: give -o PATH");
    if (format == record::Format::ctf) {
      check_ctf_dir(path);
      dir.emplace(path);
    } else {
      file.emplace(path);
    }
  }
  // The recording is complete: its files stay.
  void keep() {
    if (file) file->keep();
    if (dir) dir->keep();
  }
};

// The recording, made when the first image's probes are known.
struct Recording {
  record::Format format;
  std::string path;
  int args = 0;
  tsc::Calibration clock;
  std::unique_ptr<record::Recorder> rec;

  record::Recorder& start(const std::vector<record::ProbeInfo>& probes) {
    record::RunInfo run{probes, args, clock};
    rec = std::make_unique<record::Recorder>(run, format, path);
    return *rec;
  }
};

// The raw records wait beside the trace: on the file system the user chose for it.
std::string spool_dir_of(const std::string& path, record::Format format) {
  (void)format;  // a CTF directory may not exist yet: its parent, as a file's
  std::filesystem::path p = path;
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

int command_status(const TraceReport& report) {
  if (report.spool_error) return 1;
  if (!report.command_status) return 0;
  WaitStatus ws(*report.command_status);
  if (ws.exited()) return ws.exit_code();
  if (ws.killed()) return 128 + ws.term_signal();
  return 0;
}

}  // namespace

int record_command(const std::vector<std::string>& all_args) {
  std::vector<std::string> args, command;
  auto dashdash = std::find(all_args.begin(), all_args.end(), "--");
  args.assign(all_args.begin(), dashdash);
  if (dashdash != all_args.end()) command.assign(dashdash + 1, all_args.end());

  TraceOptions opts;
  std::string format, output, duration, args_text, summary_json, buffer_size;
  po::options_description desc(
      "probecost record (-p PID | -- COMMAND ARGS...) -b PROBE [-b PROBE ...] -o PATH\n"
      "                 [--format chrome|ctf] [--args N] [--summary-json FILE] [--duration S] "
      "[-F]\n                 [--buffer-size SIZE] [--drop]\n\n"
      "Records every call of each probed function: an entry event (time, thread, the first N\n"
      "integer arguments) and a return event (time, thread, the return value), written to PATH\n"
      "while the process runs, and a summary with each function's latency on stderr at the\n"
      "end. Entries and exits are jumps to trampolines that write the records into per-CPU\n"
      "buffers in the process (an int3 where no jump fits); no return address is replaced, so\n"
      "exceptions unwind as before. PROBE as for `probecost trace`.\n\n"
      "exit status: with -- COMMAND, the command's own; with -p PID, 0. 2: bad usage or a bad\n"
      "probe (nothing was touched); 1: a runtime failure (the process was left as it was).\n"
      "\noptions");
  desc.add_options()("help,h", "this help")("pid,p", po::value(&opts.pid), "record this process")(
      "probe,b", po::value(&opts.probes)->composing(), "a function to record (repeatable)")(
      "output,o", po::value(&output), "the trace: a file (chrome) or a directory (ctf)")(
      "format", po::value(&format),
      "chrome (Chrome trace-event JSON, for Perfetto UI; the default when PATH ends in .json) "
      "or ctf (CTF 1.8, for babeltrace2 and Trace Compass)")(
      "args", po::value(&args_text)->default_value("0"), "integer arguments per entry, 0 to 6")(
      "summary-json", po::value(&summary_json), "also write the summary as JSON to FILE")(
      "buffer-size,m", po::value(&buffer_size),
      "each CPU's ring of records in the process, as perf -m: 64K to 1G, rounded up to a power "
      "of two (default 16M, less on a machine of more than 16 CPUs); a burst that fills it before "
      "the "
      "drain wakes up loses nothing (writers wait for it) or, with --drop, loses records, counted")(
      "drop",
      "a writer that finds its ring full drops the record (counted lost) instead of waiting for "
      "the drain (at most 1 s, then it drops)")("duration,d", po::value(&duration),
                                                "record for this many seconds")(
      "all-matches", po::bool_switch(&opts.all_matches),
      "a symbol found in several modules: record all of them")(
      "follow-forks,F", "also record the processes it forks, as strace -f does")(
      "quiet,q", "no notes")("verbose,v",
                             "also how long each phase of the attach held the process");
  po::variables_map vm = parse_options(args, desc, "record");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!opts.pid == command.empty()) {
    throw UsageError(opts.pid ? "give -p PID or -- COMMAND, not both"
                              : "nothing to record: give -p PID or -- COMMAND ARGS...");
  }
  opts.command = command;
  if (opts.probes.empty()) throw UsageError("no probe: give -b FUNCTION");
  for (const auto& p : opts.probes) parse_probe(p);
  // Before the recording: it is destroyed (finishing its files) before they are removed.
  TracePlace place(output, record::choose_format(format, output));
  Recording recording;
  recording.format = record::choose_format(format, output);
  std::optional<Output> summary_out;
  if (!summary_json.empty()) summary_out.emplace(summary_json);
  if (summary_out && place.file) summary_out->refuse_same_file(*place.file, "--summary-json", "-o");
  if (vm.count("duration")) opts.duration_s = parse_seconds("--duration", duration);
  recording.path = output;
  recording.args = static_cast<int>(parse_count("--args", args_text, 0, record::kMaxArgs));
  CallRecording calls;
  if (!buffer_size.empty())
    calls.buffer_bytes = parse_buffer_size("--buffer-size", buffer_size, 64 << 10, 1 << 30);
  // Before anything is attached or launched: the process is not held while we calibrate.
  recording.clock = tsc::calibrate();
  calls.args = recording.args;
  calls.drop = vm.count("drop") > 0;
  calls.tsc_hz = static_cast<double>(recording.clock.hz);
  calls.spool_dir = spool_dir_of(output, recording.format);
  calls.start = [&recording](const std::vector<record::ProbeInfo>& probes) -> record::Recorder& {
    return recording.start(probes);
  };
  opts.calls = &calls;
  opts.via = Via::Jump;
  opts.announce = !vm.count("quiet");
  opts.tool = "probecost record";
  opts.follow_forks = vm.count("follow-forks") > 0;
  TraceReport report = run_trace(opts, std::cerr);
  // The process ended before any probe went in: an empty recording of the probes asked for.
  if (!recording.rec) {
    std::vector<record::ProbeInfo> none;
    for (const auto& spec : opts.probes) none.push_back({spec, spec, "", 0});
    recording.start(none);
  }
  recording.rec->finish();
  recording.rec->summary().print(std::cerr);
  // The hold, as `trace` reports it: in the notes, every phase with -v, and in the JSON.
  if (opts.announce && report.held_s > 0)
    std::cerr << "probecost record: process " << report.pid << " held stopped " << std::fixed
              << std::setprecision(2) << report.held_s * 1e3 << std::defaultfloat
              << " ms while the probes went in\n";
  if (vm.count("verbose")) write_held_phases(std::cerr, report);
  if (summary_out) {
    nlohmann::json j = recording.rec->summary().json();
    j["held_s"] = report.held_s;
    nlohmann::json phases = nlohmann::json::array();
    for (const auto& ph : report.held_phases)
      phases.push_back({{"phase", ph.name}, {"wall_s", ph.wall_s}, {"cpu_s", ph.cpu_s}});
    j["held_phases"] = phases;
    summary_out->write(probecost::json_text(j, 2) + "\n");
  }
  place.keep();
  return command_status(report);
}

}  // namespace probecost::cli
