#pragma once
// Pieces of trampoline code shared by trampoline.cpp (the layout of a trampoline, counting) and
// call_code.cpp (call records). Internal to the breakpoint library (it exposes Zydis types).
#include <cstdint>
#include <vector>

#include "breakpoint/in_tracee/trampoline.hpp"
#include "breakpoint/x86/x86_asm.hpp"

namespace probecost::tramp {

constexpr auto RAX = ZYDIS_REGISTER_RAX, RCX = ZYDIS_REGISTER_RCX, RDX = ZYDIS_REGISTER_RDX,
               RSI = ZYDIS_REGISTER_RSI, RDI = ZYDIS_REGISTER_RDI, RSP = ZYDIS_REGISTER_RSP,
               EAX = ZYDIS_REGISTER_EAX, ECX = ZYDIS_REGISTER_ECX, EDX = ZYDIS_REGISTER_EDX,
               ESI = ZYDIS_REGISTER_ESI, AL = ZYDIS_REGISTER_AL, R8 = ZYDIS_REGISTER_R8,
               R9 = ZYDIS_REGISTER_R9, R10 = ZYDIS_REGISTER_R10, R11 = ZYDIS_REGISTER_R11;
constexpr ZydisInstructionAttributes kLock = ZYDIS_ATTRIB_HAS_LOCK;
constexpr ZydisInstructionAttributes kFs = ZYDIS_ATTRIB_HAS_SEGMENT_FS;

// Where the body's saves are, seen from %rsp inside it: each saved register's original value,
// and the original %rsp (the red zone and every push above).
struct Frame {
  std::int64_t above = 0;
  std::vector<std::pair<ZydisRegister, std::int64_t>> saved;
  // The operand that reads register `r` as the site had it: the register itself when the body
  // has not saved (and so not clobbered) it, else its stack slot.
  ZydisEncoderOperand original(ZydisRegister r) const;
};

// The addresses of one restartable sequence (rseq(2)): found by a first pass, used by the
// second (every branch is rel32 and every RIP-relative operand disp32, so the layout does not
// depend on them).
struct Sequence {
  RuntimeAddr arm, start, post_commit, abort, descriptor;
  bool operator==(const Sequence&) const = default;
};

// A body's sequences and the cold code they reach: the counting or the record (`main`), and a
// record's drop, counted in a sequence of its own (`drop`); for a record, the sync record it
// needs first (`need_sync`, in a sequence of its own: `sync`, then back to `main`), the wait for
// room (`full`), the drop (`dropped`), the reader's wake (`wake`, `sync_wake`) and where they all
// end (`done`).
struct Rseq {
  Sequence main, drop, sync;
  RuntimeAddr no_cpu, full, dropped, wake, done, waited, need_sync, sync_wake;
  bool operator==(const Rseq&) const = default;
};

// rseq->rseq_cs = &descriptor: the kernel clears it when it aborts, so every attempt sets it.
void arm_rseq(x86::Assembler& a, std::int32_t rseq_offset, const Sequence& in, Sequence& out);
// The rseq signature, then the abort handler (back to `arm`): the kernel checks the 4 bytes
// before the abort address against the signature the thread registered (glibc: RSEQ_SIG).
void emit_abort(x86::Assembler& a, const Sequence& in, Sequence& out);
// struct rseq_cs {u32 version, flags; u64 start_ip, post_commit_offset, abort_ip}, 32-aligned.
void emit_descriptor(x86::Assembler& a, const Sequence& in, Sequence& out);

// The operand for the 8 bytes at `target`: RIP-relative if the whole trampoline at `at` reaches
// it, else through `scratch` loaded with the absolute address.
ZydisEncoderOperand reach(x86::Assembler& a, RuntimeAddr at, RuntimeAddr target,
                          ZydisRegister scratch);

// One call record (call_buffer.hpp), on entry or at an exit, in the body of a trampoline whose
// saves `frame` describes; rax, rcx, rdx, rsi are the body's to use.
void emit_call_record(x86::Assembler& a, const TrampolineSpec& spec, bool exit, const Frame& frame,
                      const Rseq& in, Rseq& out);
// A stack snapshot (stack_record.hpp) as the record's words, in its sequence (stack_code.cpp):
// %rax the slot, %rdx the TSC, %rcx and %rsi kept; %rdi (DF, from the prologue, emitted before
// the sequence) and %r8-%r10 clobbered.
void emit_snapshot_prologue(x86::Assembler& a);
void emit_snapshot(x86::Assembler& a, const CallRecordTarget& t, const Frame& frame);
// Its cold code, after the jump back: the abort, the sync record a call record needs first,
// the two ways a record is dropped and counted (no CPU buffer, no room), the descriptors.
// `frame`: the body's, whose stack the cold code runs on; `exit`: the body's record is an exit.
void emit_call_record_cold(x86::Assembler& a, const TrampolineSpec& spec, bool exit,
                           const Frame& frame, const Rseq& in, Rseq& out);

}  // namespace probecost::tramp
