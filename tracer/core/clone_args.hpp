#pragma once
// A new thread's first thread pointer and stack, read from its parent's clone(2) or clone3(2)
// arguments while the parent is stopped at its clone event (they are still in its registers,
// and clone3's struct in its memory).
#include <sys/user.h>

#include <cstdint>
#include <optional>

#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost {

// clone(2)'s tls (r8), or clone3(2)'s clone_args.tls; without CLONE_SETTLS the parent's own.
// Nothing without the parent's registers or when clone3's arguments cannot be read.
std::optional<std::uint64_t> child_thread_pointer(TraceeMemory& memory,
                                                  const user_regs_struct* parent);
// clone(2)'s stack (rsi), the child's %rsp itself; clone3(2)'s stack + stack_size, the top of
// the area it gave. 0 when unknown.
std::uint64_t child_stack(TraceeMemory& memory, const user_regs_struct* parent);

}  // namespace probecost
