// probecost trace (-p PID[,PID...] ... | -- COMMAND ARGS...) -b PROBE [-b PROBE ...] [options]
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "breakpoint/int3/step_over.hpp"
#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/output.hpp"
#include "cli/parse.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "common/paths.hpp"
#include "trace/report.hpp"
#include "trace/trace.hpp"
#include "tracer/os/wait_status.hpp"
#include "tracer/symbols/cxx_names.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

// Every -p, each a PID or a list of them (strace's -p "1 2", and 1,2): in order, each once.
std::vector<pid_t> parse_pids(const std::vector<std::string>& texts) {
  std::vector<pid_t> out;
  for (std::string text : texts) {
    std::replace(text.begin(), text.end(), ',', ' ');
    std::istringstream in(text);
    for (std::string one; in >> one;) {
      auto pid = static_cast<pid_t>(parse_count("-p", one, 1, 4194304));
      if (std::find(out.begin(), out.end(), pid) != out.end()) {
        throw UsageError("process " + one + " is given twice (-p)");
      }
      out.push_back(pid);
    }
  }
  return out;
}

}  // namespace

int trace_command(const std::vector<std::string>& all_args) {
  // Everything after "--" is the command, untouched by option parsing.
  std::vector<std::string> args, command;
  auto dashdash = std::find(all_args.begin(), all_args.end(), "--");
  args.assign(all_args.begin(), dashdash);
  if (dashdash != all_args.end()) command.assign(dashdash + 1, all_args.end());

  TraceOptions opts;
  std::string format, output, list, duration, stack_depth, top_text, folded, via, step_over,
      stack_size;
  po::options_description desc(
      "probecost trace (-p PID[,PID...] [-p PID...] | -- COMMAND ARGS...) -b PROBE [-b PROBE ...] "
      "[options]\n\n"
      "Puts probes into a running process or a command, counts every hit with an empty\n"
      "handler, and leaves the process as it was. Each probe is a jump to a trampoline where\n"
      "the site allows one (no trap: a few ns a hit, counted in the process), else an int3\n"
      "(every hit stops the thread for probecost: microseconds); --via chooses, and the report\n"
      "says which each probe got and why. PROBE: SYMBOL, MODULE:SYMBOL (libc.so.6:malloc),\n"
      "SYMBOL+OFFSET, 0xADDRESS, or a USDT marker usdt:PROVIDER:NAME (usdt:python:line) or\n"
      "usdt:MODULE:PROVIDER:NAME; MODULE by file name or SONAME; C++ functions by demangled\n"
      "name (middle: every overload; 'middle(long)'; ns::Klass::method); SYMBOL@VERSION.\n"
      "An IFUNC (strlen, memcpy) is probed at the implementation\n"
      "the process uses. Ends after --duration, on SIGINT/SIGTERM/SIGHUP, or when the process\n"
      "ends (or execs, with --no-follow-exec).\n\n"
      "exit status: with -- COMMAND, the command's own (128 + N when signal N killed it), as\n"
      "with strace and perf stat; with -p PID, 0. probecost's own failures: 2 bad usage or a\n"
      "bad probe (nothing was touched), 1 a runtime failure (the process was left as it was).\n"
      "\noptions");
  std::vector<std::string> pid_texts;
  desc.add_options()("help,h", "this help")(
      "pid,p", po::value(&pid_texts)->composing(),
      "trace this process (repeatable, or a list: -p 1,2 or -p '1 2')")(
      "probe,b", po::value(&opts.probes)->composing(), "a probe (repeatable)")(
      "list,l", po::value(&list),
      "list the target's function symbols matching a glob, and exit; 'usdt:GLOB' lists its USDT "
      "probes (usdt:*, usdt:python:*), with their semaphores and argument specs")(
      "list-usdt", "list every USDT probe of the target (-l 'usdt:*'), and exit")(
      "all-matches", po::bool_switch(&opts.all_matches),
      "a symbol found in several modules: probe all of them")(
      "stacks", po::bool_switch(&opts.stacks),
      "capture the call stack at every hit: a jump probe copies the registers and the top of "
      "the thread's stack (--stack-size) and probecost unwinds the copies as it runs; an "
      "int3 probe stops the thread and is unwound over ptrace, tens of microseconds per hit")(
      "stack-size", po::value(&stack_size)->default_value("8192"),
      "with --stacks: bytes of stack a jump probe copies per hit (perf's --call-graph "
      "dwarf,SIZE), 64 to 65408 (python3's stacks need up to 9 KiB, C programs' 1-3.5); 0: "
      "every probe an int3, unwound over ptrace")(
      "usdt-args", po::bool_switch(&opts.usdt_args),
      "USDT probes: read the arguments at every hit (numbers sized and signed as the note says, "
      "text quoted, truncated at 64 bytes with '...') and count each distinct list; every "
      "probe is then an int3")(
      "folded", po::value(&folded),
      "with --stacks: also write them folded to FILE (flamegraph.pl, speedscope), each frame "
      "its function")("folded-offsets",
                      "with --folded: each frame as the report prints it, 'main+0x1f in prog'")(
      "stack-depth", po::value(&stack_depth)->default_value("16"), "frames per stack")(
      "top", po::value(&top_text)->default_value("5"), "stacks to print per probe")(
      "duration,d", po::value(&duration), "trace for this long: seconds, or 500ms, 2m, 1h")(
      "kill-on-exit", po::bool_switch(&opts.kill_on_exit),
      "kill a launched command when the trace ends (default: it runs on untraced)")(
      "via", po::value(&via)->default_value("auto"),
      "int3, jump (a jmp to a trampoline: no trap, no stop per hit), or auto (a jump where the "
      "site allows, int3 elsewhere)")("events", po::bool_switch(&opts.events),
                                      "jump probes write a {TSC, id, arg} record per hit into a "
                                      "ring shared with probecost")(
      "step-over", po::value(&step_over)->default_value("auto"),
      "int3 probes: singlestep, emulate, outline or auto")(
      "format,f", po::value(&format)->default_value("text"), "text, json or csv")(
      "output,o", po::value(&output),
      "write the report to FILE (default: standard output; standard error when probecost "
      "launched the command, whose standard output is its own)")(
      "no-follow-exec", "end the trace when the process calls exec (default: probe the new image)")(
      "follow-forks,F",
      "also probe the processes it forks (fork, vfork, clone without CLONE_THREAD), theirs, "
      "and what they exec, as strace -f does (-f is --format); hits per process and in total")(
      "quiet,q", "no progress line, no notes")(
      "verbose,v", "also each int3 probe's hits by thread, with the threads' names");
  po::variables_map vm = parse_options(args, desc, "trace");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  auto pids = parse_pids(pid_texts);
  if (!pids.empty()) {
    opts.pid = pids.front();
    opts.more_pids.assign(pids.begin() + 1, pids.end());
  }
  if (!opts.pid == command.empty()) {
    throw UsageError(opts.pid ? "give -p PID or -- COMMAND, not both"
                              : "nothing to trace: give -p PID or -- COMMAND ARGS...");
  }
  opts.command = command;
  Format report_format = parse_format(format);
  if (vm.count("duration")) opts.duration_s = parse_seconds("--duration", duration);
  opts.step_over = parse_step_over(step_over);
  opts.via = parse_via(via);
  opts.stack_depth = static_cast<unsigned>(parse_count("--stack-depth", stack_depth, 1, 4096));
  opts.stack_size = static_cast<std::uint32_t>(parse_count("--stack-size", stack_size, 0, 65408));
  if (opts.stack_size && opts.stack_size < 64) throw UsageError("--stack-size: 0, or 64 to 65408");
  unsigned top = static_cast<unsigned>(parse_count("--top", top_text, 0));
  for (const auto& p : opts.probes) parse_probe(p);  // syntax errors before touching anything
  if (vm.count("list-usdt")) list = "usdt:*";
  if (is_usdt_spec(list)) {
    for (const auto& p : list_target_usdt(opts, list)) {
      std::cout << usdt_name(p) << " " << p.address.hex() << " semaphore "
                << (p.semaphore ? p.semaphore->hex() : "-") << " args "
                << (p.args.empty() ? "-" : p.args) << "\n";
    }
    return 0;
  }
  if (!list.empty()) {
    auto syms = list_target_symbols(opts, list);
    for (const auto& s : syms) {
      std::cout << s.address.hex() << " " << demangle(s.name) << " " << base_name(s.module) << "\n";
    }
    return 0;
  }
  if (opts.probes.empty()) throw UsageError("no probe: give -b PROBE (or --list PATTERN)");
  // Before anything is attached or launched: fail now, not after the trace. A launched
  // command's standard output is its own (as with strace -c and perf stat): the report goes to
  // standard error then.
  Output out(output, command.empty() ? STDOUT_FILENO : STDERR_FILENO);
  if (vm.count("folded") && !opts.stacks) throw UsageError("--folded needs --stacks");
  if (vm.count("folded-offsets") && !vm.count("folded"))
    throw UsageError("--folded-offsets needs --folded");
  // A jump probe's trampoline writes one of the two into the process: its {TSC, id, arg} event
  // or its stack snapshot (the event ring has no room for a stack).
  if (opts.events && opts.stacks) throw UsageError("--events and --stacks: give one of them");
  for (const char* o : {"stack-size", "stack-depth"})
    if (!vm[o].defaulted() && !opts.stacks)
      throw UsageError(std::string("--") + o + " needs --stacks");
  std::optional<Output> folded_out;
  if (vm.count("folded")) folded_out.emplace(folded);
  if (folded_out) folded_out->refuse_same_file(out, "--folded", "-o");
  bool quiet = vm.count("quiet") > 0;
  opts.progress = !quiet && status_line_allowed(opts.pid);
  opts.announce = !quiet;
  opts.follow_exec = !vm.count("no-follow-exec");
  opts.follow_forks = vm.count("follow-forks") > 0;
  check_probe_kinds(opts);
  TraceReport report = run_trace(opts, std::cerr);
  std::ostringstream text;
  if (report_format == Format::Json) {
    text << json_text(trace_json(report), 2) << "\n";
  } else if (report_format == Format::Csv) {
    write_trace_csv(text, report);
  } else {
    write_trace_text(text, report, top, vm.count("verbose") > 0);
  }
  out.write(text.str());
  if (folded_out) folded_out->write(trace_folded_stacks(report, vm.count("folded-offsets") > 0));
  // Like strace and perf stat: the launched command's own exit status, or 128 + its signal.
  if (report.command_status) {
    WaitStatus ws(*report.command_status);
    if (ws.exited()) return ws.exit_code();
    if (ws.killed()) return 128 + ws.term_signal();
  }
  return 0;
}

}  // namespace probecost::cli
