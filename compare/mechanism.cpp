#include "compare/mechanism.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace probecost {

const std::vector<Mechanism>& all_mechanisms() {
  static const std::vector<Mechanism> all = {
      {MechanismId::Baseline,
       "baseline",
       "the probe site with nothing in it: a call and a counter increment",
       {"--site", "plain"},
       HitSource::SiteCalls,
       "",
       std::nullopt,
       5'000'000,
       true},
      {MechanismId::MarkerOff,
       "marker-off",
       "static marker compiled in, disabled: flag load + test + branch",
       {"--site", "marker", "--marker", "off"},
       HitSource::SiteCalls,
       "",
       std::nullopt,
       5'000'000,
       true},
      {MechanismId::Marker,
       "marker",
       "static marker enabled: {TSC, id, arg} written to a per-thread ring",
       {"--site", "marker", "--marker", "on"},
       HitSource::MarkerRecords,
       "",
       std::nullopt,
       5'000'000},
      {MechanismId::Int3Signal,
       "int3-signal",
       "int3 compiled into the site, empty SIGTRAP handler in the process",
       {"--site", "int3", "--sigtrap-handler"},
       HitSource::SignalTraps,
       "",
       std::nullopt,
       200'000},
      {MechanismId::Int3Ptrace,
       "int3-ptrace",
       "int3 inserted by the ptrace tracer, empty handler, classic single-step step-over",
       {"--site", "probe"},
       HitSource::TracerHits,
       "probecost_site_probe",
       StepOverChoice::SingleStep,
       20'000},
      {MechanismId::Int3PtraceFast,
       "int3-ptrace-fast",
       "int3 inserted by the ptrace tracer, empty handler, one stop per hit (emulate or outline)",
       {"--site", "probe"},
       HitSource::TracerHits,
       "probecost_site_probe",
       StepOverChoice::Auto,
       50'000},
      {MechanismId::Jump,
       "jump",
       "the tracer patches a jmp to a trampoline in the tracee, which writes the marker's record",
       {"--site", "probe"},
       HitSource::TracerHits,
       "probecost_site_probe",
       std::nullopt,
       5'000'000},
      // A hit is a call: its entry and its return. Its records are kept for the whole run
      // (compare/runner.cpp), 64 bytes a call: fewer iterations than jump.
      {MechanismId::Record,
       "record",
       "probecost record: jumps at the entry and the ret, each writing a call record {TSC, "
       "thread, sp, arg or rax} into a per-CPU buffer (rseq)",
       {"--site", "probe"},
       HitSource::TracerHits,
       "probecost_site_probe",
       std::nullopt,
       1'000'000},
      {MechanismId::Uprobe,
       "uprobe",
       "the kernel's uprobe on the probe site, counted by a perf event (uprobe PMU); no tracer",
       {"--site", "probe"},
       HitSource::KernelUprobe,
       "probecost_site_probe",
       std::nullopt,
       50'000},
      {MechanismId::UprobeNop5,
       "uprobe-nop5",
       "the kernel's uprobe on the same site starting with a 5-byte NOP, which it need not step",
       {"--site", "nop5"},
       HitSource::KernelUprobe,
       "probecost_site_nop5",
       std::nullopt,
       200'000},
      {MechanismId::UprobePush,
       "uprobe-push",
       "the kernel's uprobe on the same site starting with push %rax, which it emulates",
       {"--site", "push"},
       HitSource::KernelUprobe,
       "probecost_site_push",
       std::nullopt,
       200'000},
      {MechanismId::PtraceFloor,
       "ptrace-floor",
       "int3 compiled into the site; the tracer only waits and resumes: what ptrace itself costs",
       {"--site", "int3"},
       HitSource::TracerHits,
       "",
       std::nullopt,
       50'000},
  };
  return all;
}

const Mechanism& mechanism(MechanismId id) {
  for (const auto& m : all_mechanisms()) {
    if (m.id == id) return m;
  }
  throw Error("no mechanism of id " + std::to_string(static_cast<int>(id)));
}

std::vector<MechanismId> all_mechanism_ids() {
  std::vector<MechanismId> ids;
  for (const auto& m : all_mechanisms()) ids.push_back(m.id);
  return ids;
}

std::optional<MechanismId> find_mechanism(const std::string& name) {
  for (const auto& m : all_mechanisms()) {
    if (m.name == name) return m.id;
  }
  return std::nullopt;
}

std::vector<MechanismId> parse_mechanisms(const std::vector<std::string>& names) {
  std::vector<MechanismId> ids;
  for (const auto& n : names) {
    if (n == "all") {
      for (MechanismId id : all_mechanism_ids()) ids.push_back(id);
    } else if (auto id = find_mechanism(n)) {
      ids.push_back(*id);
    } else {
      std::string known;
      for (const auto& m : all_mechanisms()) known += (known.empty() ? "" : ", ") + m.name;
      throw UsageError("unknown mechanism '" + n + "' (known: " + known + ")");
    }
  }
  return ids;
}

std::vector<Mechanism> select_mechanisms(const std::vector<MechanismId>& ids) {
  std::vector<Mechanism> out = {mechanism(MechanismId::Baseline)};
  for (MechanismId id : ids) {
    if (std::none_of(out.begin(), out.end(), [&](const Mechanism& o) { return o.id == id; }))
      out.push_back(mechanism(id));
  }
  return out;
}

}  // namespace probecost
