#pragma once
// Making a stopped tracee thread run one system call of our choosing.
#include <sys/types.h>

#include <array>

#include "breakpoint/tracee_memory.hpp"

namespace probecost {

// Runs syscall `nr` with `args` in thread `tid`, which must be in a ptrace-stop, and puts its
// registers and the borrowed code bytes back afterwards. Returns the raw result (-errno on
// failure, as the kernel returns it).
long inject_syscall(pid_t tid, TraceeMemory& memory, long nr, const std::array<long, 6>& args);

}  // namespace probecost
