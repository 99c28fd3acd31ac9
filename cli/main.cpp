// probecost: what does it cost to instrument a program? Subcommands:
//   compare   run the built-in inferior under each instrumentation mechanism
//   overhead  what probes cost a real workload, measured and predicted per mechanism
//   experiment, report  the seeds' measurements redone, as tables and as an HTML page
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "tracer/core/cannot_trace.hpp"
#include "tracer/os/ticker.hpp"
#include "tracer/symbols/cannot_probe.hpp"

namespace {

void on_stop_signal(int sig) {
  probecost::note_stop_signal(sig);
}

// SIGINT/SIGTERM/SIGHUP end a run cleanly: no SA_RESTART, so a blocked waitpid returns EINTR
// and the loop gets to restore the tracee before probecost exits.
//
// Installed before anything else: from a constructor that runs before the executable's other
// static initialisers (priority 101 is the first one a program may use), and again at the top
// of main. Only the dynamic loader's own work comes before it (about 1 ms here: LD_DEBUG=statistics
// counts 1.4M cycles); a signal then still kills probecost, which has touched nothing yet.
// The three are unblocked too: a mask inherited across exec must not make probecost deaf to
// them (and one that was sent while blocked is delivered now, to the handler).
__attribute__((constructor(101))) void install_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    sigaction(sig, &sa, nullptr);
    sigaddset(&stops, sig);
  }
  sigprocmask(SIG_UNBLOCK, &stops, nullptr);
}

void usage(std::ostream& out) {
  out << "usage: probecost COMMAND [options]\n\n"
         "commands:\n"
         "  trace      probes in a running process (-p PID) or a command, counted: jumps where\n"
         "             they fit, int3 elsewhere\n"
         "  record     every call of some functions (entry, return, args, latency) to a trace\n"
         "             file (Chrome JSON for Perfetto, or CTF), from a running process or a "
         "command\n"
         "  replay     a recording's calls nested per thread, or (--report) per function: calls,\n"
         "             total, self, percentiles\n"
         "  compare    measure the cost per hit of each instrumentation mechanism\n"
         "  overhead   what probes cost a command (or a running process): measured, and\n"
         "             predicted for every mechanism; or the arithmetic alone (--cost)\n"
         "  experiment the seeds' measurements redone: markers, scalability, multi-probe,\n"
         "             int3-vs-marker (or all)\n"
         "  report     one HTML page with the experiments' charts and tables\n"
         "  restore    put back what a killed probecost left in a process, and only that (-p PID)\n"
         "  bench step-over\n"
         "             every step-over strategy on every kind of first instruction\n\n"
         "'probecost help COMMAND' (or 'probecost COMMAND --help') for the options of one "
         "command.\n";
}

using Command = int (*)(const std::vector<std::string>&);

// Every subcommand, by the name it is called with; nullptr for none.
Command find_command(const std::string& name) {
  static const std::pair<const char*, Command> commands[] = {
      {"trace", probecost::cli::trace_command},
      {"record", probecost::cli::record_command},
      {"replay", probecost::cli::replay_command},
      {"compare", probecost::cli::compare_command},
      {"overhead", probecost::cli::overhead_command},
      {"experiment", probecost::cli::experiment_command},
      {"report", probecost::cli::report_command},
      {"restore", probecost::cli::restore_command},
      {"bench", probecost::cli::bench_command},
  };
  for (const auto& [n, command] : commands) {
    if (name == n) return command;
  }
  return nullptr;
}

// Runs a subcommand: bad usage, or a target or probe the engine refuses, is exit 2, any other
// failure exit 1, each said on stderr.
int run(const std::string& name, Command command, const std::vector<std::string>& args) {
  try {
    return command(args);
  } catch (const probecost::UsageError& e) {
    std::cerr << "probecost " << name << ": " << e.what() << "\n";
    return 2;
  } catch (const probecost::CannotTrace& e) {  // no such process, a kernel thread, no program
    std::cerr << "probecost " << name << ": " << e.what() << "\n";
    return 2;
  } catch (const probecost::CannotProbe& e) {  // no such symbol, inside an instruction
    std::cerr << "probecost " << name << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "probecost " << name << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  install_stop_handlers();
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "help" && argc > 2) {
    // `probecost help trace` is `probecost trace --help` (`help bench step-over` too).
    cmd = argv[2];
    args.assign(argv + 3, argv + argc);
    if (cmd != "bench") args.clear();
    args.push_back("--help");
  } else if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(std::cout);
    return 0;
  } else if (cmd == "--version") {
    std::cout << "probecost " PROBECOST_VERSION "\n";
    return 0;
  }
  Command command = find_command(cmd);
  if (!command) {
    std::cerr << "probecost: unknown command '" << cmd << "'\n";
    usage(std::cerr);
    return 2;
  }
  return run(cmd, command, args);
}
