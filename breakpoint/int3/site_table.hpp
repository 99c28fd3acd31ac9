#pragma once
// The sites of one tracee, looked up by address on every hit. A sorted flat vector: a hit does a
// binary search over a few entries and allocates nothing.
#include <memory>
#include <vector>

#include "breakpoint/int3/site.hpp"

namespace probecost {

class SiteTable {
 public:
  explicit SiteTable(TraceeMemory& memory) : memory_(&memory) {}

  // Creates (or returns the existing) site at `at`; not enabled yet.
  BreakpointSite& add(RuntimeAddr at, std::string label = {});
  // Disables the site first, then drops it.
  void remove(RuntimeAddr at);
  BreakpointSite* find(RuntimeAddr at);

  void disable_all();  // best effort on every site; rethrows the first failure afterwards
  void forget_all();   // the address space went away (exit, exec)
  void clear() { sites_.clear(); }  // drops every site, writing nothing

  // Every site enabled from now on is announced to `watcher` once.
  void set_watcher(SiteWatcher watcher) { watcher_ = std::move(watcher); }
  // Every site enabled from now on is recorded before its int3 is written; removing one says so.
  void set_recorder(SiteRecorder recorder) { recorder_ = std::move(recorder); }

  auto begin() const { return sites_.begin(); }
  auto end() const { return sites_.end(); }
  std::size_t size() const { return sites_.size(); }
  bool empty() const { return sites_.empty(); }

 private:
  TraceeMemory* memory_;
  SiteWatcher watcher_;
  SiteRecorder recorder_;
  std::vector<std::unique_ptr<BreakpointSite>> sites_;  // sorted by address
};

}  // namespace probecost
