#pragma once
// The USDT semaphores a traced process's probes raised (tracer/symbols/usdt.hpp): an unsigned
// short per probe that the program reads before it computes the marker's arguments, and skips
// them while it is zero. Each tracer adds one while it is attached and takes exactly that one
// away when it leaves (the kernel's uprobe does the same for bpftrace, ref_ctr_offset), so
// that two tracers at once never undo each other's count.
//
// Every change is made with every thread of the process stopped (the probes go in and come
// out so): the program cannot read a half-written value. The kernel's own update (a uprobe
// registered at that moment) is a read-modify-write under the mm's lock, and ours is a read
// and a write of /proc/PID/mem: both at once could lose one of the two updates; nothing in
// /proc/PID/mem lets a tracer do better short of running a locked add in the tracee.
//
// The guardian (tracer/int3/guardian.hpp) is told of each one, and lowers it if probecost dies.
// It is told before we lower one ourselves, so that a death between the two leaves the
// semaphore one too high (the program computes arguments nobody reads) rather than taking
// away another tracer's count.
//
// Each raise is also recorded in the process, in a table of ours (semaphore_table.hpp), for
// `probecost restore` should the guardian die too; the table goes at detach, its records all
// lowered.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "breakpoint/in_tracee/semaphore_table.hpp"
#include "breakpoint/x86/tracee_memory.hpp"
#include "tracer/int3/guardian.hpp"

namespace probecost {

class Semaphores {
 public:
  // One more probe reads the semaphore at `at` (in the mapping `file`): the first raises it.
  // `witness`: the probe's site, written just before, with every thread stopped: a fork
  // child's copy holds the raise if and only if it holds that site's bytes (a fork's copy
  // of the memory comes before or after the whole batch of writes, never inside it).
  void raise(TraceeMemory& memory, RuntimeAddr at, const trap::FileIdentity& file,
             Guardian* guardian, RuntimeAddr witness);
  // A probe of it went with its library (dlclose): nothing to lower, the memory is gone.
  void forget(RuntimeAddr at, Guardian* guardian);
  // Every one raised, lowered by one (detach). Errors (the process gone) end the lowering.
  void lower_all(TraceeMemory& memory, Guardian* guardian);
  // Whether a fork child's copy holds the bytes probecost wrote at a site.
  using CopyHolds = std::function<bool(RuntimeAddr site)>;
  // A fork child's copy of the memory holds our raises, those whose witness it holds: lowered
  // there, the parent's kept. One it does not hold is not lowered: that count is not ours.
  void lower_copy(TraceeMemory& child, const CopyHolds& holds) const;
  // The child of a traced fork takes over the parent's raises that its copy holds, and its
  // copy of the table, written through `memory` (the child's).
  void adopt(const Semaphores& parent, const CopyHolds& holds, TraceeMemory& memory);
  // The address space went (exec): nothing to lower.
  void clear() {
    held_.clear();
    table_.reset();
  }
  // Tells a new guardian (after an exec, or started late) of every one raised.
  void watch_all(Guardian& guardian) const;
  bool empty() const { return held_.empty(); }
  // The table raises are recorded in from now on (mapped before the first raise).
  void set_table(const sema::TableWriter& table) { table_ = table; }
  const std::optional<sema::TableWriter>& table() const { return table_; }
  // The table's mapping is to go (detach, every raise lowered): no more records.
  void drop_table() { table_.reset(); }
  // The value at `at` now.
  static std::uint16_t value(TraceeMemory& memory, RuntimeAddr at);

 private:
  struct Held {
    trap::FileIdentity file;
    unsigned probes = 0;
    RuntimeAddr witness;
    RuntimeAddr record;  // the state byte of its record in the table (0: none)
  };
  void mark(TraceeMemory& memory, const Held& h, std::uint8_t state) const;
  std::map<RuntimeAddr, Held> held_;
  std::optional<sema::TableWriter> table_;
};

}  // namespace probecost
