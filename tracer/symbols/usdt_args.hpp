#pragma once
// The arguments of a USDT marker, as its note writes them (GAS operands, <sys/sdt.h>'s
// STAP_PROBE_ASM_OPERANDS): "SIZE@OPERAND" separated by spaces. SIZE is 1, 2, 4 or 8 bytes,
// negative for a signed value; OPERAND is a register (%rbp, %eax, %r8d, %al), a constant
// ($42, $-1), or memory: OFFSET(%reg) (-4@112(%rsp), 8@-80(%rbx), 8@(%rax)). Read at the marker's
// nop with the thread stopped there (an int3 hit): a register's value, or the bytes in memory.
#include <sys/user.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost {

struct UsdtArg {
  enum class Kind { Register, Constant, Memory, Unsupported };
  Kind kind = Kind::Unsupported;
  int size = 8;  // bytes
  bool is_signed = false;
  int reg = -1;            // offset of the 64-bit register in user_regs_struct, bytes
  int reg_bits = 64;       // the part named: %eax 32, %ax 16, %al 8
  bool high_byte = false;  // %ah, %bh, %ch, %dh
  std::int64_t value = 0;  // Constant: the constant; Memory: the offset
  std::string text;        // as written
};

// Every argument of `specs` ("8@%rbp -4@%eax"); one that cannot be read (a symbol's
// address, `foo(%rip)`; an index register) is Kind::Unsupported, the others still read.
std::vector<UsdtArg> parse_usdt_args(const std::string& specs);

// Its value at a hit, sign-extended or zero-extended from its size; nothing when unsupported
// or its memory cannot be read. `regs`: the thread's registers at the nop (RIP one past it).
std::optional<std::int64_t> usdt_arg_value(const UsdtArg& arg, const user_regs_struct& regs,
                                           TraceeMemory& memory);

// An unsigned 8-byte argument that points at printable text (python's file and function
// names), up to `bound` bytes, "..." appended when the string is longer; else nothing.
std::optional<std::string> usdt_arg_string(std::int64_t value, TraceeMemory& memory,
                                           std::size_t bound = 64);

// All the arguments at a hit, as a bpftrace user would print them: numbers in decimal, text
// quoted, "?" for one that cannot be read: `"/tmp/w.py", "f", 2`.
std::string usdt_args_text(const std::vector<UsdtArg>& args, const user_regs_struct& regs,
                           TraceeMemory& memory, std::size_t bound = 64);

}  // namespace probecost
