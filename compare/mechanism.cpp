#include "compare/mechanism.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace probecost {

const std::vector<Mechanism>& all_mechanisms() {
  static const std::vector<Mechanism> all = {
      {"baseline",
       "the probe site with nothing in it: a call and a counter increment",
       {"--site", "plain"},
       HitSource::SiteCalls,
       "",
       "",
       5'000'000,
       true},
      {"marker-off",
       "static marker compiled in, disabled: flag load + test + branch",
       {"--site", "marker", "--marker", "off"},
       HitSource::SiteCalls,
       "",
       "",
       5'000'000,
       true},
      {"marker",
       "static marker enabled: {TSC, id, arg} written to a per-thread ring",
       {"--site", "marker", "--marker", "on"},
       HitSource::MarkerRecords,
       "",
       "",
       5'000'000},
      {"int3-signal",
       "int3 compiled into the site, empty SIGTRAP handler in the process",
       {"--site", "int3", "--sigtrap-handler"},
       HitSource::SignalTraps,
       "",
       "",
       200'000},
      {"int3-ptrace",
       "int3 inserted by the ptrace tracer, empty handler, classic single-step step-over",
       {"--site", "probe"},
       HitSource::TracerHits,
       "probecost_site_probe",
       "singlestep",
       20'000},
      {"int3-ptrace-fast",
       "int3 inserted by the ptrace tracer, empty handler, one stop per hit (emulate or outline)",
       {"--site", "probe"},
       HitSource::TracerHits,
       "probecost_site_probe",
       "auto",
       50'000},
      {"jump",
       "the tracer patches a jmp to a trampoline in the tracee, which writes the marker's record",
       {"--site", "probe"},
       HitSource::TracerHits,
       "probecost_site_probe",
       "jump",
       5'000'000},
      {"uprobe",
       "the kernel's uprobe on the probe site, counted by a perf event (uprobe PMU); no tracer",
       {"--site", "probe"},
       HitSource::KernelUprobe,
       "probecost_site_probe",
       "",
       50'000},
      {"uprobe-nop5",
       "the kernel's uprobe on the same site starting with a 5-byte NOP, which it need not step",
       {"--site", "nop5"},
       HitSource::KernelUprobe,
       "probecost_site_nop5",
       "",
       200'000},
      {"uprobe-push",
       "the kernel's uprobe on the same site starting with push %rax, which it emulates",
       {"--site", "push"},
       HitSource::KernelUprobe,
       "probecost_site_push",
       "",
       200'000},
      {"ptrace-floor",
       "int3 compiled into the site; the tracer only waits and resumes: what ptrace itself costs",
       {"--site", "int3"},
       HitSource::TracerHits,
       "",
       "floor",
       50'000},
  };
  return all;
}

const Mechanism& mechanism_by_name(const std::string& name) {
  for (const auto& m : all_mechanisms()) {
    if (m.name == name) return m;
  }
  std::string known;
  for (const auto& m : all_mechanisms()) known += (known.empty() ? "" : ", ") + m.name;
  throw UsageError("unknown mechanism '" + name + "' (known: " + known + ")");
}

std::vector<Mechanism> select_mechanisms(const std::vector<std::string>& names) {
  std::vector<Mechanism> out;
  auto add = [&](const Mechanism& m) {
    if (std::none_of(out.begin(), out.end(), [&](const Mechanism& o) { return o.name == m.name; }))
      out.push_back(m);
  };
  add(mechanism_by_name("baseline"));
  for (const auto& n : names) {
    if (n == "all") {
      for (const auto& m : all_mechanisms()) add(m);
    } else {
      add(mechanism_by_name(n));
    }
  }
  return out;
}

}  // namespace probecost
