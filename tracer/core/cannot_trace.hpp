#pragma once
// CannotTrace: the process asked for cannot be traced, or the command cannot be launched, for a
// reason of the target's own (no such process, a kernel thread, a zombie, one that exited
// while we attached, no such program). Not the kernel refusing a ptrace call (no permission,
// traced already): that is an Error with errno's text. The engine says what and which; the
// command line decides what a user sees (cli/main.cpp: exit code 2, as for bad input).
#include <sys/types.h>

#include <string>

#include "common/error.hpp"

namespace probecost {

class CannotTrace : public Error {
 public:
  enum class Reason {
    NoCommand,     // an empty command line
    NoProgram,     // argv[0] is in no directory of $PATH
    BadPid,        // 0 or negative
    Itself,        // probecost's own PID
    NoProcess,     // no process has that PID (or it exited while we attached)
    Thread,        // a thread of another process, not a process
    Zombie,        // exited, waiting to be reaped
    KernelThread,  // no user space
  };

  // pid: 0 when launching. what: the message, which names both.
  CannotTrace(pid_t pid, Reason reason, const std::string& what)
      : Error(what), pid_(pid), reason_(reason) {}

  pid_t pid() const { return pid_; }
  Reason reason() const { return reason_; }

 private:
  pid_t pid_;
  Reason reason_;
};

}  // namespace probecost
