#pragma once
// The guardian: a small process that outlives probecost's death and puts our int3 bytes back.
//
// An int3 left in a process that nobody traces kills it with SIGTRAP at its next hit. If
// probecost is killed (SIGKILL, the OOM killer) it cannot restore anything itself, so for a
// process we attached to, a guardian holds an open /proc/PID/mem and the list of sites, and
// learns of probecost's death from end-of-file on a pipe only probecost writes to. The kernel
// closes a dying process's files before it detaches its tracees (do_exit: exit_files before
// exit_notify), so the bytes usually go back before any thread runs again.
//
// A byte goes back only where the code is still the one probecost wrote into (device, inode
// and file offset of the mapping there, read from /proc/PID/maps after the death) and still
// holds our int3: a library dlclose'd meanwhile and another one dlopen'd at its address must
// not get the old library's byte written into its code (code_identity.hpp; issue 16).
//
// It also lowers the USDT semaphores probecost raised (tracer/core/semaphores.hpp), by one each,
// where the mapping is still the file's data it was raised in, each record of the raise in the
// process's semaphore table marked lowered first (so that a later restore does not lower it
// again).
//
// What it cannot save: a thread that had already trapped on an int3 and was waiting in its
// SIGTRAP stop when probecost died. The kernel detaches it with the SIGTRAP still to deliver
// (the trap area's handler takes it: tracer/int3/int3_area.hpp).
#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "common/address.hpp"

namespace probecost {

class Guardian {
 public:
  // Starts the guardian of process `pid`, handing it `mem_fd` (our /proc/PID/mem): the program
  // probecost-guard, spawned (guard_main.cpp), else a double fork of ours. It is not our child
  // (re-parented to init), so our waitpid(-1) never sees it, and it ignores the terminal's
  // signals (Ctrl-C reaches probecost's whole process group).
  static std::unique_ptr<Guardian> start(pid_t pid, int mem_fd);
  ~Guardian();
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  // `at` holds our int3 now, in the code `code` (all zero: an anonymous mapping, whose
  // identity cannot be checked); `original` is the byte it displaced.
  void watch(RuntimeAddr at, std::uint8_t original, const trap::FileIdentity& code);
  // The USDT semaphore (an unsigned short) at `at`, in the mapping `data`, holds one of ours:
  // lowered by one if probecost dies (tracer/core/semaphores.hpp), after the state byte of its
  // record at `record` (0: none) is marked lowered. unwatch: no longer.
  void watch_semaphore(RuntimeAddr at, const trap::FileIdentity& data, RuntimeAddr record);
  void unwatch_semaphore(RuntimeAddr at);
  // The bytes are back (or the process is gone): the guardian exits without touching anything.
  void done();

 private:
  explicit Guardian(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace probecost
