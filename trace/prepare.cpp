// Before the stop: what can be read of a running process without stopping it. Its symbols
// (libdwfl reads /proc/PID/maps and the files), its probes resolved (their IFUNC slots and the
// instruction boundaries read from its memory), and for jump probes the code and branch index
// of their modules (ModuleCode keeps them for the run). Nothing is written and nothing is
// decided here: once every thread is stopped, the symbols and probes are used if the code
// mappings are unchanged (the same files at the same places: the same code, the same
// symbols), else everything is read again; every check that needs the threads is made then.
#include <sstream>

#include "breakpoint/jump/jump_plan.hpp"
#include "common/error.hpp"
#include "trace/run.hpp"
#include "tracer/jump/module_code.hpp"
#include "tracer/os/memory.hpp"

namespace probecost::trace_run {

std::string code_maps(const std::vector<Mapping>& maps) {
  std::ostringstream out;
  for (const auto& m : maps) {
    if (m.exec && !m.path.empty()) {
      out << m.start.hex() << ' ' << m.end.hex() << ' ' << m.offset << ' ' << m.file_id << '\n';
    }
  }
  return out.str();
}

namespace {

// The probes as resolve() would have them at the stop, from memory read while the process
// runs; nothing when that is not enough (Prepared::probes).
std::optional<std::vector<ResolvedProbe>> resolve_running(const TraceOptions& opts, pid_t pid,
                                                          const ProcessSymbols& symbols) {
  try {
    std::vector<std::string> specs;
    for (const auto& spec : opts.probes) {
      ProbeSpec ps = parse_probe(spec);
      // An address may be in code no file holds (JIT): resolved at the stop, when it cannot
      // change any more.
      if (ps.address) return std::nullopt;
      if (opts.calls || !waits_for_library(ps, symbols)) specs.push_back(spec);
    }
    ProcMemory memory(pid);
    // No resolver call: an IFUNC that no relocated slot shows throws, and waits for the stop.
    return resolve_probes(specs, symbols, memory, pid, opts.all_matches);
  } catch (const Error&) {
    return std::nullopt;  // said at the stop, by the resolution that counts
  }
}

// The jump plans' decoding, done once before the stop on the code the plans will read (the
// module's file) and thrown away: the decoder's tables are faulted in now. Inside the hold,
// the first plan of a run took 0.37-0.41 ms for a 4-byte function and 0.55-0.73 ms for
// malloc's 791 bytes, against 0.02-0.07 ms for the next ones: their first page faults
// (~10 us each on this guest), not the decoding.
void warm_decoder(pid_t pid, const Prepared& prepared, const std::vector<Mapping>& maps) {
  if (!prepared.probes) return;
  for (const auto& p : *prepared.probes) {
    auto function = prepared.symbols->sized_function_containing(p.address);
    if (!function) continue;
    for (const auto& m : maps) {
      std::string why;
      if (!m.exec || !m.contains(function->address)) continue;
      auto module = ModuleCode::of(pid, m, why);
      auto bias = module ? module->bias(m) : std::nullopt;
      std::vector<std::uint8_t> code(function->size);
      if (bias && module->read(bias->unapply(function->address), code))
        plan_jump(function->address, code, p.address, why);
    }
  }
}

}  // namespace

std::map<pid_t, std::unique_ptr<Prepared>> prepare_all(const TraceOptions& opts) {
  std::map<pid_t, std::unique_ptr<Prepared>> out;
  if (opts.pid) out[opts.pid] = prepare(opts, opts.pid);
  for (pid_t pid : opts.more_pids) out[pid] = prepare(opts, pid);
  return out;
}

std::unique_ptr<Prepared> prepare(const TraceOptions& opts, pid_t pid) {
  auto out = std::make_unique<Prepared>();
  try {
    out->code_maps = code_maps(read_maps(pid));
    out->symbols = std::make_unique<ProcessSymbols>(pid);
    out->probes = resolve_running(opts, pid, *out->symbols);
    if (opts.via == Via::Int3 || (opts.stacks && !opts.stack_size)) return out;
    // The functions the jump plans decode, looked up now (ProcessSymbols keeps the answers).
    for (const auto& p : out->probes.value_or(std::vector<ResolvedProbe>{}))
      out->symbols->sized_function_containing(p.address);
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
    warm_decoder(pid, *out, maps);
  } catch (const Error&) {
    return nullptr;  // a PID that cannot be read: the attach says why
  }
  return out;
}

}  // namespace probecost::trace_run
