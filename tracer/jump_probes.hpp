#pragma once
// Jump-patched probes in a traced process: the tracer side of breakpoint/jump_*.
//
// A probe's first instructions are replaced by a 5-byte jmp to a trampoline that counts the hit
// (and with events writes the static marker's record) inside the tracee, runs the displaced
// instructions and jumps back: no trap, no stop, no system call per hit. The trampolines, hit
// counters and event rings live in a memfd that the tracee maps within +-2 GiB of the sites and
// the tracer maps too, so it reads counts and drains records while the process runs.
//
// Installing happens with every thread stopped, in the order of the kernel's text_poke_bp.
// Removing is TracedProcess's job (detach() and the like), because every way out must do it.
// If probecost dies, the jumps stay and keep working: the process runs on correctly, and
// `probecost restore -p PID` finds the area by its header and puts the bytes back.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/branch_scan.hpp"
#include "breakpoint/event_ring.hpp"
#include "breakpoint/jump_area.hpp"
#include "tracer/process.hpp"
#include "tracer/symbols.hpp"

namespace probecost {

struct JumpOptions {
  bool events = false;             // write a record per hit
  std::uint32_t event_sites = 16;  // sites per area that may have events (a ring each)
  std::uint64_t ring_capacity = 1 << 16;
  std::uint32_t max_sites = 64;  // per area
};

// The jump areas a process maps (ours, or left by a probecost that died), read from their
// headers. An area that cannot be read is skipped, with the reason in `notes`.
std::vector<jump::ParsedArea> read_jump_areas(TracedProcess& process,
                                              std::vector<std::string>& notes);

class JumpProbes {
 public:
  JumpProbes(TracedProcess& process, const JumpOptions& options);
  ~JumpProbes();
  JumpProbes(const JumpProbes&) = delete;
  JumpProbes& operator=(const JumpProbes&) = delete;

  // Patches a jump at `site` (every thread of the process stopped). Returns the probe's index,
  // or nothing with the reason in `why`: the plan refused the site, a thread is inside the
  // range to patch, another probe is in it, no area could be mapped near it.
  std::optional<std::size_t> add(RuntimeAddr site, const ProcessSymbols& symbols, std::uint32_t id,
                                 std::string label, std::string& why);

  std::size_t size() const { return probes_.size(); }
  RuntimeAddr site(std::size_t probe) const { return probes_.at(probe).site; }
  std::size_t patched_length(std::size_t probe) const { return probes_.at(probe).length; }
  // Every hit so far (read while the process runs).
  std::uint64_t hits(std::size_t probe) const;
  // Records written since the last drain of this probe; `final` once no thread can write any
  // more (stopped or gone). Totals are kept in records_read()/records_lost().
  jump::Drained drain(std::size_t probe, bool final = false);
  std::uint64_t records_read(std::size_t probe) const { return probes_.at(probe).read; }
  std::uint64_t records_lost(std::size_t probe) const { return probes_.at(probe).lost; }
  bool events() const { return options_.events; }

 private:
  struct Area {
    std::uint8_t* view = nullptr;  // the tracer's mapping
    std::size_t size = 0;
    RuntimeAddr tracee_at;
    std::unique_ptr<jump::AreaWriter> writer;
  };
  struct Probe {
    RuntimeAddr site;
    std::size_t length = 0;
    std::size_t area = 0, index = 0;
    std::uint64_t cursor = 0, read = 0, lost = 0;
  };

  std::optional<JumpPlan> plan(RuntimeAddr site, const ProcessSymbols& symbols, std::string& why);
  bool range_is_free(const JumpPlan& plan, std::string& why);
  // A thread's RIP inside the bytes to patch (after the first): the reason, or empty.
  std::string thread_inside(const JumpPlan& plan);
  // Lets the threads run a moment and stops them again (a thread caught inside a patch range
  // is usually just passing through).
  void let_threads_move();
  // Direct branches from anywhere in the site's module into the patched bytes: the reason, or
  // empty.
  std::string branch_from_module(const JumpPlan& plan);
  std::optional<jump::PlacedSite> place(const JumpPlan& plan, std::uint32_t id, std::size_t& area,
                                        std::string& why);
  Area map_area(RuntimeAddr near);
  long tracee_syscall(long nr, const std::array<long, 6>& args, const char* what);

  TracedProcess& proc_;
  JumpOptions options_;
  jump::AreaLayout layout_;
  std::vector<Area> areas_;
  std::vector<Probe> probes_;
};

}  // namespace probecost
