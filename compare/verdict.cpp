// compare's verdict: the 2006 mail's sentence for the costliest mechanism, and the cheapest
// mechanism for each purpose of a probe.
#include "compare/verdict.hpp"

#include "common/format.hpp"

namespace probecost {

std::string purpose_name(ProbePurpose purpose) {
  switch (purpose) {
    case ProbePurpose::Counting:
      return "counting";
    case ProbePurpose::Recording:
      return "recording events";
    case ProbePurpose::Stacks:
      return "stacks";
  }
  return "?";
}

bool compiled_in(MechanismId id) {
  return id == MechanismId::Marker || id == MechanismId::Int3Signal;
}

// What each mechanism's measured cost covers. The int3 rows run an empty handler: they count,
// and stop the thread (a stack can be unwound then, at a cost of its own); the kernel's uprobe
// is counted by a perf event (recording or a stack needs a BPF program, not measured here);
// ptrace-floor is a floor, not a probe one can place.
bool serves(MechanismId id, ProbePurpose purpose) {
  switch (id) {
    case MechanismId::Marker:
    case MechanismId::Jump:
    case MechanismId::Record:  // a call's two records: a count, and its latency
      return purpose != ProbePurpose::Stacks;
    case MechanismId::Int3Signal:
    case MechanismId::Int3Ptrace:
    case MechanismId::Int3PtraceFast:
      return purpose != ProbePurpose::Recording;
    case MechanismId::Uprobe:
    case MechanismId::UprobeNop5:
    case MechanismId::UprobePush:
      return purpose == ProbePurpose::Counting;
    default:
      return false;
  }
}

namespace {

bool cheaper(const MechanismResult& m, const MechanismResult* than) {
  return !than || m.cpu_ns_per_hit.median < than->cpu_ns_per_hit.median;
}

std::string share(const MechanismResult& m, double rate) {
  return percent(rate * m.cpu_ns_per_hit.median / 1e7);
}

// The closing line, in the style of the 2006 mail: the costliest probing mechanism, the 2006
// measurement itself and the jump when they ran, against the marker.
void write_costliest(std::ostream& out, const CompareResult& r, double rate) {
  const MechanismResult* marker = nullptr;
  const MechanismResult* worst = nullptr;
  for (const auto& m : r.mechanisms) {
    if (!m.skipped.empty()) continue;
    if (m.mechanism.is(MechanismId::Marker)) marker = &m;
    if (m.mechanism.probing() && (!worst || m.cpu_ns_per_hit.median > worst->cpu_ns_per_hit.median))
      worst = &m;
  }
  if (!worst) return;
  auto clause = [&](const MechanismResult& m) {
    return m.mechanism.name + ": " + group_thousands(rate) + " events/s x " +
           human_ns(m.cpu_ns_per_hit.median) + "/event = " + share(m, rate) + " of a CPU";
  };
  out << "\nVerdict: " << clause(*worst);
  for (const auto& m : r.mechanisms) {
    if (m.mechanism.is(MechanismId::Int3Signal) && &m != worst && m.skipped.empty())
      out << "; " << clause(m);
  }
  for (const auto& m : r.mechanisms) {
    // The dynamic probe that needs no trap, against the static marker.
    if (!m.mechanism.is(MechanismId::Jump) || &m == worst || !m.skipped.empty()) continue;
    out << "; " << clause(m);
    if (marker && marker->cpu_ns_per_hit.median > 0) {
      out << " (" << times(m.cpu_ns_per_hit.median / marker->cpu_ns_per_hit.median)
          << "x the marker)";
    }
  }
  if (marker && marker != worst) {
    out << "; " << clause(*marker);
    if (marker->cpu_ns_per_hit.median > 0) {
      // The costliest probing mechanism, named: with only `jump` beside the marker it is no
      // breakpoint, and a ratio near 1 needs its decimals.
      double ratio = worst->cpu_ns_per_hit.median / marker->cpu_ns_per_hit.median;
      out << ". " << worst->mechanism.name << " costs " << times(ratio) << " times the marker";
    }
  }
  out << ".\n";
}

std::string with_share(const MechanismResult& m, double rate) {
  return m.mechanism.name + " " + share(m, rate) + " of a CPU";
}

}  // namespace

std::vector<Cheapest> cheapest_per_use(const CompareResult& r) {
  std::vector<Cheapest> out;
  for (ProbePurpose p : {ProbePurpose::Counting, ProbePurpose::Recording, ProbePurpose::Stacks}) {
    Cheapest c{p};
    for (const auto& m : r.mechanisms) {
      if (!m.skipped.empty() || !serves(m.mechanism.id, p)) continue;
      if (cheaper(m, c.overall)) c.overall = &m;
      if (!compiled_in(m.mechanism.id) && cheaper(m, c.running)) c.running = &m;
    }
    out.push_back(c);
  }
  return out;
}

void write_verdict(std::ostream& out, const CompareResult& r) {
  if (r.config.rates.empty()) return;
  double rate = r.config.rates.front();
  write_costliest(out, r, rate);
  out << "Cheapest at " << group_thousands(rate) << " events/s for each purpose:\n";
  for (const auto& c : cheapest_per_use(r)) {
    out << "  " << pad(purpose_name(c.purpose) + ":", 18, true);
    if (!c.overall) {
      out << "none of the mechanisms run serves it\n";
      continue;
    }
    out << with_share(*c.overall, rate)
        << (compiled_in(c.overall->mechanism.id) ? " (compiled into the program)" : "");
    if (c.running && c.running != c.overall) {
      out << "; in a running program, " << with_share(*c.running, rate);
    } else if (!c.running) {
      out << "; none of the mechanisms run goes into a running program";
    }
    if (c.purpose == ProbePurpose::Stacks) out << "; unwinding each stack costs more on top";
    out << "\n";
  }
}

nlohmann::json verdict_json(const CompareResult& r) {
  if (r.config.rates.empty()) return nullptr;
  double rate = r.config.rates.front();
  auto entry = [rate](const MechanismResult* m) -> nlohmann::json {
    if (!m) return nullptr;
    return {{"mechanism", m->mechanism.name},
            {"cpu_ns_per_hit", m->cpu_ns_per_hit.median},
            {"cpu_percent", rate * m->cpu_ns_per_hit.median / 1e7},
            {"compiled_in", compiled_in(m->mechanism.id)}};
  };
  nlohmann::json cheapest = nlohmann::json::object();
  for (const auto& c : cheapest_per_use(r)) {
    cheapest[purpose_name(c.purpose)] = {{"overall", entry(c.overall)},
                                         {"running_program", entry(c.running)}};
  }
  return {{"rate_per_s", rate}, {"cheapest", cheapest}};
}

}  // namespace probecost
