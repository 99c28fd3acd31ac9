#pragma once
// `probecost restore -p PID`: puts back what a probecost that died left in a process, and
// nothing else.
//
// Only bytes probecost recorded writing are touched, and only while they are still exactly
// what it wrote, in the mapping it wrote them into (device, inode, file offset):
// - jump probes, through the header of the shared area they jump into (a memfd named
//   probecost-jump): it lists each site with its original and patched bytes;
// - int3 probes, through the records of the trap area (breakpoint/in_tracee/trap_area.hpp), an
// anonymous
//   mapping found by its self-checking header. The SIGTRAP handler probecost installed there
//   is taken out too, and the program's own disposition put back, if it is still ours.
// Every other int3 in executable file mappings (compared with the file) is reported and left
// alone: the program's own, a debugger's or a kernel uprobe's. An int3 is put back with every
// thread stopped and a thread already trapped on it rewound.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/address.hpp"

namespace probecost {

class TracedProcess;

struct RestoredByte {
  RuntimeAddr address;
  std::string module;
  std::string where;  // symbol+offset
  std::uint8_t original = 0;
  bool restored = false;
  bool ours = false;    // written by probecost (a record of the trap area says so)
  std::string why_not;  // when left alone
};

// A jump probe found through the header of a jump area (see breakpoint/in_tracee/jump_area.hpp).
struct RestoredJump {
  RuntimeAddr address;
  std::string where;  // symbol+offset in module
  std::size_t length = 0;
  std::uint64_t hits = 0;  // what its counter says
  pid_t tracer_pid = 0;
  std::string state;  // "patched", "half-patched", "original", "changed since (left alone)"
  bool restored = false;
};

// A USDT semaphore a killed probecost raised, from the table it kept in the process
// (breakpoint/in_tracee/semaphore_table.hpp).
struct RestoredSemaphore {
  RuntimeAddr address;
  std::string module;
  pid_t tracer_pid = 0;
  std::uint16_t before = 0, after = 0;  // its value, before and after
  bool lowered = false;
  std::string why_not;  // when left alone
};

struct RestoreReport {
  pid_t pid = 0;
  std::size_t mappings_compared = 0;
  std::vector<RestoredByte> bytes;
  std::vector<RestoredJump> jumps;
  std::vector<RestoredSemaphore> semaphores;
  // What became of the SIGTRAP handler of each trap area: put back, or why not.
  std::vector<std::string> handlers;
  std::vector<std::string> notes;  // areas that could not be read, and why
  // Jump areas and call buffers a killed probecost left, unmapped (nothing jumps there any
  // more, no thread is in them).
  std::uint64_t unmapped_bytes = 0;
};

// With `dry_run`, finds and reports but writes nothing.
RestoreReport restore_process(pid_t pid, bool dry_run);

// At an attach (every thread of `proc` stopped): the jump areas an earlier probecost left
// whose sites are all back to their original bytes (a detach that found a thread it could
// not bring out: tracer/core/process_run_out.cpp), and their call buffers once every such area
// goes, are unmapped where no thread can be in them, as `probecost restore` does. A killed
// probecost's area, whose jumps are still in, is left to restore. What was unmapped and kept, said.
struct Reclaimed {
  std::uint64_t unmapped_bytes = 0;
  std::vector<std::string> notes;
};
Reclaimed reclaim_left_areas(TracedProcess& proc);

}  // namespace probecost
