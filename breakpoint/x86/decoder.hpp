#pragma once
// The x86-64 decoder (Zydis) behind the little the tracer needs: an instruction's length, what
// kind of instruction it is for emulation, and where its RIP-relative displacement or relative
// branch offset sits in its bytes for relocation.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/address.hpp"

namespace probecost {

// A general-purpose register, by its place in user_regs_struct (see reg_field()).
enum class Gpr : std::int8_t {
  None = -1,
  Rax,
  Rbx,
  Rcx,
  Rdx,
  Rsi,
  Rdi,
  Rbp,
  Rsp,
  R8,
  R9,
  R10,
  R11,
  R12,
  R13,
  R14,
  R15
};

struct Instruction {
  enum class Kind {
    Nop,        // any nop form, endbr64
    Push,       // push r64
    Pop,        // pop r64
    MovRegReg,  // mov r64, r64 / mov r32, r32 (zero-extends)
    AddSubImm,  // add/sub r64, imm
    Lea,        // lea r64, [base + index*scale + disp] (base may be RIP)
    JmpRel,     // jmp rel8/rel32
    CallRel,    // call rel32
    Jcc,        // jcc rel8/rel32
    Ret,        // ret, ret imm16
    Other,
  };
  RuntimeAddr address;
  std::uint8_t length = 0;
  std::array<std::uint8_t, 15> bytes{};
  Kind kind = Kind::Other;
  // The instruction as text (Zydis's formatter), for messages: formatted when asked, for the
  // formatting took 2 us an instruction, most of an attach's planning of malloc (0.5 ms).
  std::string text() const;
  std::string quoted() const;  // 'text'

  Gpr dst = Gpr::None, src = Gpr::None;  // registers (Push: src, Pop: dst, Lea: dst)
  bool operand32 = false;                // MovRegReg/Lea with 32-bit registers
  bool subtract = false;                 // AddSubImm
  std::int64_t imm = 0;                  // AddSubImm immediate, Ret stack adjustment
  // Lea's memory operand, and an indirect jmp's (through a register: `src`)
  Gpr base = Gpr::None, index = Gpr::None;
  std::uint8_t scale = 0;
  std::int64_t disp = 0;
  // An indirect jmp whose target jump_target() can compute: through a 64-bit register, or
  // through memory without a segment override or a 32-bit address.
  bool target_operand = false;
  bool rip_relative = false;  // any operand addressed relative to RIP
  // Relative branches: the absolute target, and the condition (Jcc, as the low nibble of 0x7X)
  RuntimeAddr target;
  std::uint8_t condition = 0;
  bool relative_branch = false;
  // Where RIP-relative displacement / relative immediate live in `bytes` (0: none)
  std::uint8_t disp_offset = 0, disp_size = 0;
  std::uint8_t imm_offset = 0, imm_size = 0;
  bool uses_segment_fs_gs = false;
  // rep/repe/repne string instruction: one single-step runs one iteration of it.
  bool rep = false;

  // How the instruction passes control on, for deciding whether it can run from a copy elsewhere.
  enum class Flow {
    Sequential,    // falls through to next() (ud2 and hlt too: they fault the same anywhere)
    RelJump,       // jmp rel8/rel32
    RelCondJump,   // jcc rel8/rel32
    RelShortOnly,  // loop, loopcc, jrcxz: a rel8 target and no rel32 form
    RelCall,       // call rel32
    IndirectJump,  // jmp through a register or memory (rip_relative: through a fixed slot)
    IndirectCall,  // call through a register or memory
    Return,        // ret, iret
    SystemCall,    // syscall, sysenter (and sysret/sysexit, which fault in user mode)
    Interrupt,     // int n, int3, int1, into
    Transaction,   // xbegin: its abort address is relative to RIP
    FarBranch,     // jmp/call/ret far, through a segment selector
  };
  Flow flow = Flow::Sequential;
  int mnemonic = 0;  // the ZydisMnemonic, for re-encoding without exposing Zydis here
  // RFLAGS status bits (CF PF AF ZF SF OF, at their RFLAGS positions) the instruction reads, and
  // those it writes or leaves undefined.
  std::uint32_t status_flags_read = 0, status_flags_written = 0;

  RuntimeAddr next() const { return address + length; }
};

// The six status flags of RFLAGS, which `lock inc` and `lock xadd` overwrite.
inline constexpr std::uint32_t kStatusFlags =
    (1u << 0) | (1u << 2) | (1u << 4) | (1u << 6) | (1u << 7) | (1u << 11);

// Decodes the instruction at `bytes` (up to 15 of them), which sits at `at` in the tracee.
std::optional<Instruction> decode(std::span<const std::uint8_t> bytes, RuntimeAddr at);

}  // namespace probecost
