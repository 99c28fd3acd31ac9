// The code of a stack snapshot (stack_record.hpp) in a trampoline, inside the call record's
// restartable sequence: %rax is the record's slot, %rdx holds the TSC, %rcx the CPU's control
// block and %rsi the head (both needed for the commit, so parked in %r8 and %r9 while the copy
// uses them), %r11 the direction flag as read before the sequence (a push or pop inside it
// would leave %rsp off by 8 when the kernel aborts the sequence between the two). Nothing in
// the sequence writes %r11: an abort (a signal, a preemption) restarts it from its start, with
// what it tests there as it was (the copy's %rdi was, once, and a copy cut by a signal came
// back as "the direction flag set"):
//
//   words:   tsc, %fs:0, rsp | id, site, rbp, rbx, r12-r15
//   lookup:  %rdx = the thread table's first slot for %fs:0; up to kThreadProbe entries
//   found:   lo <= rsp < hi, else off_stack; %rcx = min(stack_bytes, hi - rsp)
//            DF clear, else df_set; copied = %ecx; rep movsb [rsp, rsp + %rcx) -> slot + 128
//   done:    %rcx, %rsi back from %r8, %r9
//   cold:    unknown / off_stack / df_set: copied = 0 and the reason, then done
#include "breakpoint/in_tracee/stack_record.hpp"
#include "breakpoint/in_tracee/trampoline_code.hpp"
#include "common/error.hpp"

namespace probecost::tramp {

using namespace x86;

namespace {

constexpr auto RBX = ZYDIS_REGISTER_RBX, RBP = ZYDIS_REGISTER_RBP, R12 = ZYDIS_REGISTER_R12,
               R13 = ZYDIS_REGISTER_R13, R14 = ZYDIS_REGISTER_R14, R15 = ZYDIS_REGISTER_R15,
               R11D = ZYDIS_REGISTER_R11D;

struct Labels {
  RuntimeAddr loop, found, unknown, off_stack, df_set, done, end;
  bool operator==(const Labels&) const = default;
};

void must_jump(Assembler& a, ZydisMnemonic m, RuntimeAddr to) {
  if (!a.branch32(m, to)) throw Error("stack snapshot code: a branch out of reach");
}

void header_words(Assembler& a, const CallRecordTarget& t, const Frame& frame) {
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 0), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(R10), mem(ZYDIS_REGISTER_NONE, 0)}, kFs);  // the TCB's self
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 8), reg(R10)});
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RDX), mem(RSP, frame.above)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 16), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 22, 2), imm(static_cast<std::int16_t>(t.id))});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RDX), imm(static_cast<std::int64_t>(t.site.value()))});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, jump::kSnapshotRipOffset), reg(RDX)});
  static constexpr ZydisRegister kSaved[] = {RBP, RBX, R12, R13, R14, R15};
  for (int i = 0; i < 6; ++i) {
    ZydisEncoderOperand from = frame.original(kSaved[i]);
    if (from.type == ZYDIS_OPERAND_TYPE_MEMORY) {
      a.must(ZYDIS_MNEMONIC_MOV, {reg(RDX), from});
      from = reg(RDX);
    }
    a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, jump::kSnapshotRegsOffset + 8 * i), from});
  }
}

// %rdx = the first of the thread's slots in the table; clobbers %rcx.
void first_slot(Assembler& a, const CallRecordTarget& t) {
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RDX), reg(R10)});
  a.must(ZYDIS_MNEMONIC_SHR, {reg(RDX), imm(12)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RCX), reg(R10)});
  a.must(ZYDIS_MNEMONIC_SHR, {reg(RCX), imm(22)});
  a.must(ZYDIS_MNEMONIC_XOR, {reg(RDX), reg(RCX)});
  a.must(ZYDIS_MNEMONIC_AND, {reg(EDX), imm(jump::kThreadSlots - 1)});
  a.must(ZYDIS_MNEMONIC_SHL, {reg(EDX), imm(5)});  // kThreadEntry
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RCX), imm(static_cast<std::int64_t>(t.threads.value()))});
  a.must(ZYDIS_MNEMONIC_ADD, {reg(RDX), reg(RCX)});
}

void set_bound(Assembler& a, jump::SnapshotBound b, RuntimeAddr done) {
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, jump::kSnapshotSizeOffset, 4), imm(0)});
  a.must(ZYDIS_MNEMONIC_MOV,
         {mem(RAX, jump::kSnapshotSizeOffset + 4, 4), imm(static_cast<std::int64_t>(b))});
  must_jump(a, ZYDIS_MNEMONIC_JMP, done);
}

void emit(Assembler& a, const CallRecordTarget& t, const Frame& frame, const Labels& in,
          Labels& out) {
  header_words(a, t, frame);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(R8), reg(RCX)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(R9), reg(RSI)});
  first_slot(a, t);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ECX), imm(jump::kThreadProbe)});
  out.loop = a.here();
  a.must(ZYDIS_MNEMONIC_CMP, {mem(RDX, 0), reg(R10)});
  must_jump(a, ZYDIS_MNEMONIC_JZ, in.found);
  a.must(ZYDIS_MNEMONIC_ADD, {reg(RDX), imm(jump::kThreadEntry)});
  a.must(ZYDIS_MNEMONIC_DEC, {reg(ECX)});
  must_jump(a, ZYDIS_MNEMONIC_JNZ, in.loop);
  must_jump(a, ZYDIS_MNEMONIC_JMP, in.unknown);
  out.found = a.here();
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RSI), mem(RSP, frame.above)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RSI), mem(RDX, 8)});
  must_jump(a, ZYDIS_MNEMONIC_JB, in.off_stack);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RCX), mem(RDX, 16)});
  a.must(ZYDIS_MNEMONIC_SUB, {reg(RCX), reg(RSI)});
  must_jump(a, ZYDIS_MNEMONIC_JBE, in.off_stack);  // hi <= rsp
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EDX), imm(t.layout.stack_bytes)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RCX), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_CMOVNBE, {reg(RCX), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_TEST, {reg(R11D), reg(R11D)});
  must_jump(a, ZYDIS_MNEMONIC_JNZ, in.df_set);
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, jump::kSnapshotSizeOffset, 4), reg(ECX)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, jump::kSnapshotSizeOffset + 4, 4), imm(0)});
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RDI), mem(RAX, jump::kSnapshotHeader)});
  constexpr std::uint8_t kRepMovsb[] = {0xF3, 0xA4};
  a.raw(kRepMovsb);
  out.done = a.here();
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RCX), reg(R8)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RSI), reg(R9)});
  must_jump(a, ZYDIS_MNEMONIC_JMP, in.end);
  out.unknown = a.here();
  set_bound(a, jump::SnapshotBound::UnknownThread, in.done);
  out.off_stack = a.here();
  set_bound(a, jump::SnapshotBound::OffStack, in.done);
  out.df_set = a.here();
  set_bound(a, jump::SnapshotBound::DirectionFlag, in.done);
  out.end = a.here();
}

}  // namespace

// Before the sequence: %r11d = DF (0x400) of the site's flags. pushfq/pop, not popfq: reading
// the flags is cheap, writing them back is what costs.
void emit_snapshot_prologue(Assembler& a) {
  a.must(ZYDIS_MNEMONIC_PUSHFQ, {});
  a.must(ZYDIS_MNEMONIC_POP, {reg(R11)});
  a.must(ZYDIS_MNEMONIC_AND, {reg(R11D), imm(0x400)});
}

// Every branch is rel32, so the layout does not depend on the labels: a first pass finds them,
// the second uses them. The cold ends stay inside the sequence (before its commit).
void emit_snapshot(Assembler& a, const CallRecordTarget& t, const Frame& frame) {
  RuntimeAddr h = a.here();
  Labels guess{h, h, h, h, h, h, h};
  Labels found = guess;
  Assembler probe(h);
  emit(probe, t, frame, guess, found);
  Labels check = found;
  emit(a, t, frame, found, check);
  if (check != found) throw Error("stack snapshot code: the layout changed between passes");
}

}  // namespace probecost::tramp
