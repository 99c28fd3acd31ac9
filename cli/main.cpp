// probecost: what does it cost to instrument a program? Subcommands:
//   compare   run the built-in inferior under each instrumentation mechanism
//   overhead  the CPU share a given cost per event takes at given event rates
//   experiment, report  the seeds' measurements redone, as tables and as an HTML page
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "breakpoint/error.hpp"
#include "cli/commands.hpp"
#include "tracer/session.hpp"

namespace {

void on_stop_signal(int) {
  probecost::stop_requested() = true;
}

// SIGINT/SIGTERM/SIGHUP end a run cleanly: no SA_RESTART, so a blocked waitpid returns EINTR
// and the loop gets to restore the tracee before probecost exits.
void install_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

void usage(std::ostream& out) {
  out << "usage: probecost COMMAND [options]\n\n"
         "commands:\n"
         "  trace      int3 probes in a running process (-p PID) or a command, counted\n"
         "  compare    measure the cost per hit of each instrumentation mechanism\n"
         "  overhead   CPU share of a given cost per event at given event rates\n"
         "  experiment the seeds' measurements redone: markers, scalability, multi-probe,\n"
         "             int3-vs-marker (or all)\n"
         "  report     one HTML page with the experiments' charts and tables\n"
         "  bench step-over\n"
         "             every step-over strategy on every kind of first instruction\n\n"
         "'probecost COMMAND --help' for the options of one command.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(std::cout);
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "probecost 0.1.0\n";
    return 0;
  }
  install_stop_handlers();
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "compare") return probecost::cli::compare_command(args);
    if (cmd == "overhead") return probecost::cli::overhead_command(args);
    if (cmd == "bench") return probecost::cli::bench_command(args);
    if (cmd == "trace") return probecost::cli::trace_command(args);
    if (cmd == "experiment") return probecost::cli::experiment_command(args);
    if (cmd == "report") return probecost::cli::report_command(args);
    std::cerr << "probecost: unknown command '" << cmd << "'\n";
    usage(std::cerr);
    return 2;
  } catch (const probecost::UsageError& e) {
    std::cerr << "probecost " << cmd << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "probecost " << cmd << ": " << e.what() << "\n";
    return 1;
  }
}
