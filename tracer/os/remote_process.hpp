#pragma once
// What a part of the tracer below the process (tracer/int3/: the trap area and its SIGTRAP
// handler) may ask of a traced process: its memory and mappings, its threads' signal masks, and
// a system call run inside it. tracer/core/'s TracedProcess implements it; tracer/int3/ sees
// nothing else of it, so that the int3 floor is linked under the core and not beside it (the
// narrow interface rr's AutoRemoteSyscalls gives its callers in place of the whole Task).
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/address.hpp"

namespace probecost {

class ProcMemory;
struct Mapping;

class RemoteProcess {
 public:
  virtual ~RemoteProcess() = default;

  virtual pid_t pid() const = 0;
  // A thread whose /proc entry shows the process's memory (the leader, or a live thread).
  virtual pid_t proc_tid() = 0;
  virtual ProcMemory& memory() = 0;
  // /proc/PID/maps now (read again only when something may have changed it).
  virtual std::vector<Mapping> maps() = 0;
  // The mapping at `at`, as the maps were last read; nullptr for none.
  virtual const Mapping* mapping_at(RuntimeAddr at) = 0;

  // Every thread we trace; those stopped now with `stopped_only`.
  virtual std::vector<pid_t> thread_ids(bool stopped_only) = 0;
  // The signal mask of a thread stopped now (PTRACE_GETSIGMASK); nothing when it is not.
  virtual std::optional<std::uint64_t> thread_blocked_signals(pid_t tid) = 0;
  virtual bool set_thread_blocked_signals(pid_t tid, std::uint64_t mask) = 0;

  // A stopped thread that may run an injected system call, with its stack pointer (the call's
  // out-arguments go below its red zone); nothing when none can now.
  struct CallThread {
    pid_t tid;
    std::uint64_t rsp;
  };
  virtual std::optional<CallThread> call_thread() = 0;
  // Runs system call `nr` in thread `via` (0: any stopped thread), every other thread stopped
  // meanwhile; its raw result (-errno on failure), nothing when no thread can run it now.
  virtual std::optional<long> remote_syscall(long nr, const std::array<long, 6>& args,
                                             pid_t via = 0) = 0;
  // Runs `body` with one thread lent to every remote_syscall it makes (and named by
  // call_thread): one stop of the others, one way back and one park for them all. False when no
  // thread can run system calls now (body did not run). Nothing in `body` may read the lent
  // thread's signal mask: SIGTRAP is unblocked in it meanwhile.
  virtual bool in_one_lending(const std::function<void()>& body) = 0;
};

}  // namespace probecost
