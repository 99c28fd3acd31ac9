#pragma once
// Starting a command (untraced, or for TracedProcess::launch), and taking the reports of the
// tasks a detach could not let go of. Defined in process_start.cpp and process_detach.cpp, beside
// the code that traces what they start and release.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "tracer/os/wait_status.hpp"

namespace probecost {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  int stdin_fd = -1;              // dup2'd onto 0/1/2 in the child when >= 0
  int stdout_fd = -1;
  int stderr_fd = -1;
  int cpu = -1;  // pin the child to this CPU before exec when >= 0
};

// Once every traced process is let go: takes the reports of `tids`, tasks we still trace but
// could not detach (TracedProcess::leftovers: a zombie whose exit was not reported yet, a
// thread that was in vfork()), so that none stays held by us: a zombie cannot be reaped by
// its parent until we take its report, a stopped thread does not run. A stop is detached, an
// exit consumed. With `block`, until `command` (a child of ours) ends, and then its wait
// status; otherwise only what is there now.
std::optional<int> release_leftovers(std::vector<pid_t> tids, pid_t command, bool block);

// fork + exec with the spec's redirections and CPU, untraced; an exec failure is reported
// through a close-on-exec pipe and thrown here. The caller waits for the child.
pid_t spawn(const LaunchSpec& spec);
// spawn(), then wait for the child's end. A stop request (stop_requested()) kills it: the
// caller looks at the flag.
WaitStatus spawn_and_wait(const LaunchSpec& spec);

}  // namespace probecost
