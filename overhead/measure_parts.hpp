#pragma once
// What measure.cpp (a launched command's runs) and attached.cpp (a running process's windows)
// share. Private to overhead/.
#include <sys/resource.h>
#include <sys/time.h>

#include <functional>
#include <string>
#include <vector>

#include "overhead/overhead.hpp"
#include "trace/trace.hpp"

namespace probecost::overhead_parts {

// CPU time and context switches from getrusage: RUSAGE_CHILDREN covers every descendant that
// was reaped (the command's whole tree, once it is over), RUSAGE_SELF probecost itself.
struct Usage {
  double cpu_s = 0, voluntary = 0, involuntary = 0;
  static Usage of(int who);
  Usage operator-(const Usage& o) const {
    return {cpu_s - o.cpu_s, voluntary - o.voluntary, involuntary - o.involuntary};
  }
};

// How many times the calling thread moved to another CPU (se.nr_migrations of
// /proc/thread-self/sched; 0 when the kernel does not show it).
double my_migrations();

// Every 100 ms of a traced run: does probecost run on another CPU than the command last ran
// on? Counted into `rec`.
std::function<void(pid_t)> cpu_sampler(RunRecord& rec);

// trace's options for the measurement's probes, as asked (--via, --step-over, -F).
TraceOptions trace_options(const OverheadConfig& cfg);

// The report's probes into `rec` (hits) and `m` (how each went in), one row per probe: a
// command that execs has its probes placed again in each new image, and rows of the same
// probe placed the same way are summed.
void take_probes(const TraceReport& report, RunRecord& rec, Measurement& m);

// The figures of a traced run or window that trace's report gives (held, tracer CPU, hits),
// with probecost's own CPU since `self0` and its moves between CPUs since `migrations0`.
void take_tracer_figures(const TraceReport& report, const Usage& self0, double migrations0,
                         RunRecord& rec);

std::string run_label(const char* what, unsigned i, unsigned n);

// A running process (-p): its windows, in `m`.
void measure_attached(const OverheadConfig& cfg, Measurement& m,
                      const std::function<void(const std::string&)>& say);

}  // namespace probecost::overhead_parts
