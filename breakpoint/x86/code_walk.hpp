#pragma once
// Where code outside any module can go: the direct branches out of a piece of code with no file
// behind it (a scratch page or trampoline a previous probecost left mapped, JIT code), followed
// from a thread's PC.
//
// A jump probe is safe only if no thread arrives in the middle of its patched bytes. The module's
// branch index covers the module's own code; a thread in anonymous code is covered by nothing
// else. The way back of a relocated copy (an out-of-line copy: one instruction, then a jmp to
// the instruction after the original) is a direct jmp, rel32 or `jmp *0(%rip)` with the target
// in the next 8 bytes, so walking the code from the thread's PC finds where it will land.
// Indirect branches through registers and returns end a path: their targets are computed by
// the program (function entries, return addresses after calls), and a range a jump may patch
// holds no call.
#include <cstddef>
#include <vector>

#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost {

// The targets outside [lo, hi) of direct branches (jmp, jcc, call, jmp/call through a
// RIP-relative slot) on every path from `pc` through code in [lo, hi), and the fall-through out
// of it; decoded from `memory`, up to `max_instructions` in all.
std::vector<RuntimeAddr> exits_from(TraceeMemory& memory, RuntimeAddr pc, RuntimeAddr lo,
                                    RuntimeAddr hi, std::size_t max_instructions = 4096);

}  // namespace probecost
