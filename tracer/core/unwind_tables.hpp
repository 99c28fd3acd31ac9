#pragma once
// Where libunwind looks up the unwind information of the code at an address: the binary search
// table of the module's .eh_frame_hdr, found once per module in the process's own memory (its
// ELF and program headers, as the dynamic loader mapped them) and kept until code is mapped or
// unmapped.
//
// libunwind-ptrace's _UPT_find_proc_info finds it from the file instead, and anew whenever a
// walk moves from one module to another: it reads /proc/PID/maps, opens the file and maps all
// of it, and touches its headers and tables. Each mapping is page faults, which on this project's
// 2-vCPU guests (PVM) cost ~10 us each: a walk of one thread for its signal frames took 3.5 ms
// of an attach's 10 ms hold with it (issue 23 item 7). _UPT_find_proc_info stays the fallback for
// code with no .eh_frame_hdr of the usual encoding (or none at all: JIT code, trampolines).
#include <libunwind.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "tracer/os/maps.hpp"

namespace probecost {

class UnwindTables {
 public:
  // Reads `size` bytes of the process at `at`; false if it cannot.
  using Read = std::function<bool(std::uint64_t at, void* out, std::size_t size)>;

  // The search table of the module whose executable mapping holds `ip` in process `pid`, in the
  // form libunwind's dwarf_search_unwind_table takes (UNW_INFO_FORMAT_REMOTE_TABLE); nullptr
  // when there is none this can read.
  unw_dyn_info_t* find(pid_t pid, std::uint64_t ip, const Read& read);
  void clear();  // code was mapped or unmapped

 private:
  struct Table {
    std::uint64_t end = 0;
    std::optional<unw_dyn_info_t> info;
  };
  std::optional<unw_dyn_info_t> load(const Mapping& code, const Read& read) const;
  const Mapping* base_of(const Mapping& code) const;

  std::optional<std::vector<Mapping>> maps_;
  std::map<std::uint64_t, Table> by_start_;  // by the executable mapping's start
};

}  // namespace probecost
