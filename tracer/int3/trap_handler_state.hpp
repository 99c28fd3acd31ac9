#pragma once
// A tracee's SIGTRAP disposition, read and set with an injected rt_sigaction: how the trap
// area's handler goes in over the program's own, and how the program's comes back.
#include <optional>

#include "breakpoint/in_tracee/trap_area.hpp"

namespace probecost {

class RemoteProcess;

// The process's SIGTRAP disposition now; nothing when no thread can run the call now. The
// kernel writes it into the stack of the thread that makes the call, below its red zone.
std::optional<trap::KernelSigaction> sigtrap_disposition(RemoteProcess& proc);
// Sets the disposition to the one at `act` in tracee memory (read by the kernel: it may be
// read-only). False when no thread could run the call, or it failed.
bool set_sigtrap_disposition(RemoteProcess& proc, RuntimeAddr act);
// Puts back the program's disposition kept in the header of the trap area at `area`, and
// marks the area's handler put back.
bool put_back_disposition(RemoteProcess& proc, RuntimeAddr area);

}  // namespace probecost
