#pragma once
// Doing a displaced instruction's work on the saved registers (and the stack) instead of
// executing it: what the kernel's uprobes do for push, nop, jmp, call and ret.
#include <sys/user.h>

#include <optional>
#include <string>

#include "breakpoint/x86/decoder.hpp"
#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost {

// Empty when `in` can be emulated; otherwise why not.
std::string why_not_emulable(const Instruction& in);

// Applies `in` to `regs` (RIP included) and to the tracee's stack through `memory`.
// Returns true when only RIP changed (the caller may then write RIP alone).
bool emulate(const Instruction& in, user_regs_struct& regs, TraceeMemory& memory);

// Where the indirect jmp `in` goes, stopped before it with `regs`: its register, or the
// pointer its memory operand reads. Nothing when the decoder left its operand unknown
// (Instruction::target_operand) or the pointer cannot be read.
std::optional<RuntimeAddr> jump_target(const Instruction& in, user_regs_struct regs,
                                       TraceeMemory& memory);

// EFLAGS after a 64-bit add or sub, as the CPU computes them (CF PF AF ZF SF OF).
unsigned long long flags_after_addsub(unsigned long long flags, std::uint64_t a, std::uint64_t b,
                                      bool subtract);
// Whether the condition of Jcc 0x7<cc> holds for `flags`.
bool condition_holds(std::uint8_t cc, unsigned long long flags);

}  // namespace probecost
