#pragma once
// What every system call we make a tracee thread run needs, however it is run (single-stepped
// in remote_calls_stepped.cpp, or resumed with a way back in remote_calls_batch.cpp).
#include <sys/types.h>
#include <sys/user.h>

#include <array>

#include "common/address.hpp"

namespace probecost {

// The thread's seccomp filter applies to every system call we make it run (issue 16 §3):
// seccomp::Refused, and nothing run, unless the filter lets call `nr` from the syscall
// instruction at `at` run. Not even a call the filter would only fail: its errno would say
// nothing of why.
void check_seccomp(pid_t pid, pid_t tid, long nr, const std::array<long, 6>& args, RuntimeAddr at);

// `saved` with system call `nr`'s number and arguments. orig_rax = -1: the kernel must not
// take the thread for one interrupted in a system call and "restart" it when we resume.
user_regs_struct syscall_regs(user_regs_struct saved, long nr, const std::array<long, 6>& args);

}  // namespace probecost
