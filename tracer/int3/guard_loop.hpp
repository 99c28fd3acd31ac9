#pragma once
// The guardian's side (tracer/int3/guardian.hpp): what probecost writes to it, and its whole life
// once started. Linked both into probecost-guard (guard_main.cpp, the program probecost spawns)
// and into the tracer, whose fork of itself is the way left when that program is not found.
#include <sys/types.h>

#include <cstdint>

#include "breakpoint/in_tracee/trap_area.hpp"

namespace probecost::guard {

// probecost-guard's first argument: a program of another protocol refuses to start, and
// probecost forks its own guardian instead.
inline constexpr const char* kProtocol = "probecost-guard-1";

struct Message {
  std::uint64_t address;
  std::uint8_t original;
  std::uint8_t kind;  // 'W' watch, 'D' done, 'S' a semaphore raised, 'R' no longer
  std::uint8_t pad[6];
  trap::FileIdentity code;
  std::uint64_t record;  // 'S': the state byte of the raise's record in the table (0: none)
};
static_assert(sizeof(Message) == 48);  // < PIPE_BUF: every write is atomic

// Becomes the guardian of process `pid`: a session of its own, the terminal's signals ignored,
// named probecost-guard, every descriptor closed but `in` (the read end of the pipe), `mem`
// (/proc/PID/mem) and `maps` (/proc/PID/maps); then collects the sites until the pipe ends and
// puts the bytes back unless told 'D'. `unblock`: every signal unblocked once those are ignored
// (probecost-guard is spawned with all of them blocked, so that a Ctrl-C to probecost's process
// group cannot end it before; a forked guardian keeps probecost's mask). Never returns.
[[noreturn]] void become_guardian(pid_t pid, int in, int mem, int maps, bool unblock);

}  // namespace probecost::guard
