// probecost record (-p PID | -- COMMAND ARGS...) -b PROBE [-b PROBE ...] -o PATH [options]
#include <sys/stat.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/output.hpp"
#include "cli/parse.hpp"
#include "cli/trace_place.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "common/status_line.hpp"
#include "common/tsc.hpp"
#include "record/chrome.hpp"
#include "record/ctf.hpp"
#include "record/recorder.hpp"
#include "trace/call_drain.hpp"
#include "trace/report.hpp"
#include "trace/trace.hpp"
#include "tracer/os/wait_status.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

// The recording, made when the first image's probes are known, into the place's temporary.
struct Recording {
  record::TraceFormat format;
  const TracePlace* place = nullptr;
  std::string path;  // the user's, for errors
  int args = 0;
  bool stacks = false;
  tsc::Calibration clock;
  std::unique_ptr<record::Recorder> rec;
  std::size_t probes = 0;

  record::Recorder& start(const std::vector<record::ProbeInfo>& infos) {
    probes = infos.size();
    record::RunInfo run{infos, args, clock, stacks};
    std::unique_ptr<record::Output> writer;
    if (format == record::TraceFormat::chrome)
      writer = std::make_unique<record::ChromeWriter>(place->fd(), path, run);
    else
      writer = std::make_unique<record::CtfWriter>(place->dir(), run);
    rec = std::make_unique<record::Recorder>(run, std::move(writer));
    return *rec;
  }
};

// `--stacks`: what the entries got, and what the unwinding cost.
void say_stacks(const TraceReport& r) {
  const auto& e = r.entry_stacks;
  auto at = [&](const std::string& k) {
    auto it = e.find(k);
    return it == e.end() ? std::uint64_t{0} : it->second;
  };
  std::cerr << "probecost record: stacks: " << at("with_stack") << " entries with one ("
            << at("truncated") << " cut short by --stack-size)";
  for (const auto& [why, n] : e)
    if (why != "with_stack" && why != "truncated" && n) std::cerr << ", " << n << " " << why;
  std::cerr << "; " << r.snapshots << " snapshots, " << r.snapshots_unwound << " unwound";
  if (r.snapshots_unwound)
    std::cerr << " (" << std::fixed << std::setprecision(0)
              << r.snapshot_unwind_s * 1e9 / static_cast<double>(r.snapshots_unwound)
              << std::defaultfloat << " ns of the reader's CPU each)";
  std::cerr << ", " << r.snapshots_lost << " lost\n";
}

nlohmann::json stacks_json(const TraceReport& r) {
  nlohmann::json j = r.entry_stacks;
  j["snapshots"] = r.snapshots;
  j["unwound"] = r.snapshots_unwound;
  j["lost"] = r.snapshots_lost;
  j["unwind_cpu_s"] = r.snapshot_unwind_s;
  return j;
}

// The trace complete at the user's path, or why not ("" when it is).
std::string finish_trace(Recording& recording, TracePlace& place) {
  try {
    recording.rec->finish();
    place.commit();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

void say_trace_error(const std::string& error, const TracePlace& place, const std::string& output) {
  if (error.empty()) return;
  std::cerr << "probecost record: " << error
            << (place.stream() ? " (what " + output + " got is cut off"
                               : " (no trace was left at " + output)
            << "; the summary above counts every record)\n";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The status line's text: what the drains have kept, and how fast.
std::function<std::string(double)> status_text(const trace_run::LiveCounts& live) {
  return [&live, last = std::uint64_t{0}, last_t = 0.0](double t) mutable {
    std::uint64_t records = live.records.load(std::memory_order_relaxed);
    double rate = t > last_t ? static_cast<double>(records - last) / (t - last_t) : 0;
    last = records, last_t = t;
    std::ostringstream out;
    out << "probecost record: " << static_cast<long>(t) << " s: " << records << " events ("
        << static_cast<std::uint64_t>(rate) << "/s), " << std::fixed << std::setprecision(1)
        << static_cast<double>(live.bytes.load(std::memory_order_relaxed)) / 1e6 << " MB, "
        << live.lost.load(std::memory_order_relaxed) << " lost";
    return out.str();
  };
}

std::uintmax_t bytes_at(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    auto n = std::filesystem::file_size(path, ec);
    return ec ? 0 : n;
  }
  std::uintmax_t n = 0;
  for (const auto& f : std::filesystem::directory_iterator(path, ec)) n += f.file_size(ec);
  return n;
}

// On a terminal, once the trace is whole: "wrote N events (X MB) to PATH".
void say_written(const record::Summary& summary, std::size_t probes, const TracePlace& place,
                 const std::string& output) {
  std::uint64_t events = 0;
  for (std::size_t i = 0; i < probes; ++i)
    events += summary.probe(static_cast<std::uint32_t>(i)).events_written;
  std::cerr << "probecost record: wrote " << events << " events";
  if (!place.stream())
    std::cerr << " (" << std::fixed << std::setprecision(1)
              << static_cast<double>(bytes_at(output)) / 1e6 << std::defaultfloat << " MB)";
  std::cerr << " to " << output << "\n";
}

// Records lost: what that means, and what to do about it.
void warn_lost(const record::Summary& summary, std::size_t probes, bool drop) {
  std::uint64_t lost = summary.lost_unattributed(), calls = 0, returns = 0;
  for (std::size_t i = 0; i < probes; ++i) {
    const record::ProbeSummary& p = summary.probe(static_cast<std::uint32_t>(i));
    lost += p.events_lost, calls += p.calls_lost, returns += p.returns_lost;
  }
  if (!lost) return;
  std::cerr << "probecost record: warning: " << lost << " records lost";
  if (calls || returns)
    std::cerr << ": " << calls << " calls (their entries: not in calls) and " << returns
              << " returns (a call whose entry was kept is unmatched)";
  std::cerr << "; "
            << (drop ? "--drop drops a record whose ring is full: without it the writers wait "
                       "for the drain, and a bigger -m (--buffer-size) gives bursts more room"
                     : "the writers waited for the drain up to 1 s and then dropped (a drain that "
                       "could not keep up, or a slow disk): a bigger -m (--buffer-size), or an "
                       "output on a faster file system")
            << "\n";
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
  std::string format, output, duration, args_text, summary_json, buffer_size, stack_size,
      stack_depth;
  po::options_description desc(
      "probecost record (-p PID | -- COMMAND ARGS...) -b PROBE [-b PROBE ...] -o PATH\n"
      "                 [--format chrome|ctf] [--args N] [--summary-json FILE] [--duration S] "
      "[-F]\n                 [--buffer-size SIZE] [--drop] [--stacks [--stack-size N] "
      "[--stack-depth N]]\n\n"
      "Records every call of each probed function: an entry event (time, thread, the first N\n"
      "integer arguments) and a return event (time, thread, the return value), written to PATH\n"
      "while the process runs, and a summary with each function's latency on stderr at the\n"
      "end. Entries and exits are jumps to trampolines that write the records into per-CPU\n"
      "buffers in the process (an int3 where no jump fits); no return address is replaced, so\n"
      "exceptions unwind as before. PROBE as for `probecost trace`.\n\n"
      "USDT markers (-b usdt:PROVIDER:NAME, globs allowed) are recorded with their arguments\n"
      "(strings copied); an entry/return pair (usdt:python:function__entry and\n"
      "function__return, or -b 'usdt:python:function__*') becomes calls named by the entry's\n"
      "name argument, per thread, nested; markers that do not balance are counted, never made\n"
      "calls. Other markers are instants. Each marker is an int3 (docs/usdt.md).\n\n"
      "exit status: with -- COMMAND, the command's own; with -p PID, 0. 2: bad usage or a bad\n"
      "probe (nothing was touched); 1: a runtime failure (the process was left as it was).\n"
      "\noptions");
  desc.add_options()("help,h", "this help")("pid,p", po::value(&opts.pid), "record this process")(
      "probe,b", po::value(&opts.probes)->composing(), "a function to record (repeatable)")(
      "output,o", po::value(&output),
      "the trace: a file (chrome; a FIFO or a device such as /dev/null is written as a stream) "
      "or a new or empty directory (ctf); written under a temporary name beside it and renamed "
      "to PATH once complete")(
      "format,f", po::value(&format),
      "chrome (Chrome trace-event JSON, for Perfetto UI) or ctf (CTF 1.8, for babeltrace2 and "
      "Trace Compass). Default: ctf when PATH is an existing directory or ends in /, else "
      "chrome")("args", po::value(&args_text)->default_value("0"),
                "integer arguments per entry, 0 to 6")("summary-json", po::value(&summary_json),
                                                       "also write the summary as JSON to FILE")(
      "buffer-size,m", po::value(&buffer_size),
      "each CPU's ring of records in the process, as perf -m: 64K to 1G, rounded up to a power "
      "of two (default 16M, less on a machine of more than 16 CPUs); a burst that fills it before "
      "the "
      "drain wakes up loses nothing (writers wait for it) or, with --drop, loses records, counted")(
      "drop",
      "a writer that finds its ring full drops the record (counted lost) instead of waiting for "
      "the drain (at most 1 s, then it drops)")("duration,d", po::value(&duration),
                                                "record for this long: seconds, or 500ms, 2m, 1h")(
      "stacks",
      "each entry's stack: its jump copies the registers and the top of the stack (no trap), "
      "unwound by a thread of probecost's while the process runs; in the Chrome JSON as "
      "stackFrames/sf, in the CTF as the entry's `stack`")(
      "stack-size", po::value(&stack_size)->default_value("8192"),
      "with --stacks: bytes of stack copied per entry (perf's --call-graph dwarf,SIZE), 64 to "
      "65408")("stack-depth", po::value(&stack_depth)->default_value("16"),
               "with --stacks: frames per stack, 1 to 4096")(
      "all-matches", po::bool_switch(&opts.all_matches),
      "a symbol found in several modules: record all of them")(
      "follow-forks,F", "also record the processes it forks, as strace -f does")(
      "quiet,q", "no notes, no status line, no 'wrote' line")(
      "verbose,v", "also how long each phase of the attach held the process");
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
  if (output.empty()) throw UsageError("no output: give -o PATH");
  record::TraceFormat chosen = record::choose_format(format, output);
  std::string notes;
  if (format.empty() && chosen == record::TraceFormat::chrome && !ends_with(output, ".json"))
    notes += "probecost record: -o " + output +
             ": Chrome JSON (the format of a PATH that is no directory; --format ctf for CTF)\n";
  // Before the recording: it is destroyed (finishing its writer) before the place is, whose
  // file the writer writes.
  TracePlace place(output, chosen, notes);
  if (!vm.count("quiet")) std::cerr << notes;
  Recording recording;
  recording.format = chosen;
  recording.place = &place;
  std::optional<Output> summary_out;
  if (!summary_json.empty()) summary_out.emplace(summary_json);
  if (summary_out && !place.file_target().empty())
    summary_out->refuse_same_path(place.file_target(), "--summary-json", "-o");
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
  for (const char* o : {"stack-size", "stack-depth"}) {
    if (!vm[o].defaulted() && !vm.count("stacks"))
      throw UsageError(std::string("--") + o + " needs --stacks");
  }
  if (vm.count("stacks")) {
    calls.stack_bytes =
        static_cast<std::uint32_t>(parse_count("--stack-size", stack_size, 64, 65408));
    calls.stack_depth = static_cast<unsigned>(parse_count("--stack-depth", stack_depth, 1, 4096));
    recording.stacks = true;
  }
  calls.tsc_hz = static_cast<double>(recording.clock.hz);
  calls.spool_dir = place.spool_dir();
  calls.start = [&recording](const std::vector<record::ProbeInfo>& probes) -> record::Recorder& {
    return recording.start(probes);
  };
  opts.calls = &calls;
  opts.via = Via::Jump;
  opts.announce = !vm.count("quiet");
  opts.tool = "probecost record";
  opts.follow_forks = vm.count("follow-forks") > 0;
  // On a terminal, a status line of its own thread, from the first tick of the run (once the
  // attach, and its guardian's fork, are done) until the process is let go.
  bool terminal = !vm.count("quiet") && status_line_allowed(opts.pid);
  trace_run::LiveCounts live;
  std::optional<StatusLine> status;
  bool let_go = false;
  if (terminal) {
    calls.live = &live;
    opts.on_tick = [&](pid_t) {
      if (!status && !let_go) status.emplace(status_text(live));
    };
  }
  calls.on_let_go = [&] {
    let_go = true;
    status.reset();
  };
  check_probe_kinds(opts);
  TraceReport report = run_trace(opts, std::cerr);
  status.reset();
  // The process ended before any probe went in: an empty recording of the probes asked for.
  if (!recording.rec) {
    std::vector<record::ProbeInfo> none;
    for (const auto& spec : opts.probes) none.push_back({spec, spec, "", 0});
    recording.start(none);
  }
  // A trace that cannot be written (a full disk, EIO) loses nothing else: the summary, whole,
  // is printed and written all the same, then the error, exit 1, and no partial trace is left.
  std::string trace_error = finish_trace(recording, place);
  const record::Summary& summary = recording.rec->summary();
  std::size_t probes = recording.probes;
  summary.print(std::cerr);
  warn_lost(summary, probes, calls.drop);
  if (!vm.count("quiet") && stderr_is_terminal() && trace_error.empty())
    say_written(summary, probes, place, output);
  // The hold, as `trace` reports it: in the notes, every phase with -v, and in the JSON.
  if (opts.announce && report.held_s > 0)
    std::cerr << "probecost record: process " << report.pid << " held stopped " << std::fixed
              << std::setprecision(2) << report.held_s * 1e3 << std::defaultfloat
              << " ms while the probes went in\n";
  if (vm.count("verbose")) {
    std::cerr << "probecost record: ";  // the block's first line: the tool's message
    write_held_phases(std::cerr, report);
  }
  if (opts.announce && calls.stack_bytes) say_stacks(report);
  if (summary_out) {
    nlohmann::json j = recording.rec->summary().json();
    j["held_s"] = report.held_s;
    nlohmann::json phases = nlohmann::json::array();
    for (const auto& ph : report.held_phases)
      phases.push_back({{"phase", ph.name}, {"wall_s", ph.wall_s}, {"cpu_s", ph.cpu_s}});
    j["held_phases"] = phases;
    if (calls.stack_bytes) j["stacks"] = stacks_json(report);
    if (!trace_error.empty()) j["trace_error"] = trace_error;
    say_trace_error(trace_error, place, output);
    summary_out->write(probecost::json_text(j, 2) + "\n");
  } else {
    say_trace_error(trace_error, place, output);
  }
  return trace_error.empty() ? command_status(report) : 1;
}

}  // namespace probecost::cli
