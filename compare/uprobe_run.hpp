#pragma once
// The kernel's uprobe as compare's mechanism (uprobe, uprobe-nop5, uprobe-push): the inferior
// run with a counting uprobe event on its probe site (uprobe/uprobe.hpp), and uprobes on its
// spare sites for the runs that measure many probes installed elsewhere.
#include <memory>
#include <string>

#include "compare/mechanism.hpp"
#include "compare/runner.hpp"
#include "tracer/core/process.hpp"
#include "uprobe/uprobe.hpp"

namespace probecost {

// One run of the inferior with the kernel's uprobe on m.probe_symbol (cfg.handlers events per
// thread). Fills hits, handler_hits and step_over_plan (how the kernel handles the site); sets
// `skipped` when the kernel or the permissions refuse.
void run_uprobe(const Mechanism& m, LaunchSpec spec, const RunConfig& cfg, Sample& s);

// `count` uprobes on the inferior's spare sites (never called), system-wide, for as long as
// this lives: "many probes installed elsewhere" for every inferior started meanwhile.
class SpareUprobes {
 public:
  SpareUprobes(const std::string& inferior, unsigned count);
  ~SpareUprobes();  // slow: the kernel waits for grace periods per probe removed
  SpareUprobes(const SpareUprobes&) = delete;
  SpareUprobes& operator=(const SpareUprobes&) = delete;
  const std::string& skipped() const { return skipped_; }  // why there are none
  std::size_t size() const { return counters_.size(); }
  std::uint64_t hits() const { return counters_.total(); }  // must stay 0

 private:
  UprobeCounters counters_;
  std::string path_;
  std::string skipped_;
};

}  // namespace probecost
