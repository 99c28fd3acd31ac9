// Before the stop: what can be read of a running process without stopping it. Its symbols
// (libdwfl reads /proc/PID/maps and the files), its probes resolved, and for jump probes the
// code and branch index of their modules (ModuleCode keeps them for the run). Nothing is
// written and nothing is decided here: once every thread is stopped, the probes are resolved
// again from the same symbols (if the code mappings are unchanged), and every check that
// needs the threads is made then.
#include <sstream>

#include "common/error.hpp"
#include "trace/run.hpp"
#include "tracer/module_code.hpp"

namespace probecost::trace_run {

std::string code_maps(pid_t pid) {
  std::ostringstream out;
  for (const auto& m : read_maps(pid)) {
    if (m.exec && !m.path.empty()) {
      out << m.start.hex() << ' ' << m.end.hex() << ' ' << m.offset << ' ' << m.file_id << '\n';
    }
  }
  return out.str();
}

std::map<pid_t, std::unique_ptr<Prepared>> prepare_all(const TraceOptions& opts) {
  std::map<pid_t, std::unique_ptr<Prepared>> out;
  if (opts.pid) out[opts.pid] = prepare(opts, opts.pid);
  for (pid_t pid : opts.more_pids) out[pid] = prepare(opts, pid);
  return out;
}

std::unique_ptr<Prepared> prepare(const TraceOptions& opts, pid_t pid) {
  auto out = std::make_unique<Prepared>();
  try {
    out->code_maps = code_maps(pid);
    out->symbols = std::make_unique<ProcessSymbols>(pid);
    if (opts.via == Via::Int3 || opts.stacks) return out;
    auto maps = read_maps(pid);
    for (const auto& spec : opts.probes) {
      std::vector<ResolvedProbe> probes;
      try {
        // No memory to read yet (an IFUNC's slots), no resolver to call: what a plain symbol
        // names is enough to know the module.
        for (const auto& s :
             out->symbols->resolve_all(parse_probe(spec).symbol, parse_probe(spec).module)) {
          for (const auto& m : maps) {
            std::string why;
            if (m.exec && m.contains(s.address)) ModuleCode::of(pid, m, why);
          }
        }
      } catch (const Error&) {
        // Said once the process is stopped, by the resolution that counts.
      }
    }
  } catch (const Error&) {
    return nullptr;  // a PID that cannot be read: the attach says why
  }
  return out;
}

}  // namespace probecost::trace_run
