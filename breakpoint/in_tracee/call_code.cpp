// The code of a call record (call_buffer.hpp, format 3) in a trampoline:
//
//   arm:    lea descriptor(%rip),%rax; mov %rax,%fs:rseq_cs
//   start:  mov %fs:cpu_id,%eax; cmp $cpus,%eax; jae no_cpu
//           shl $ctl_shift,%rax; add control,%rax -> %rcx  this CPU's control block
//           mov (%rcx),%rsi                                head
//           sync_at == head, or another sub-buffer's?      to need_sync (a sub-buffer's first
//           %fs:0 != sync_tp?                              record is always a sync)
//           rdtsc; shl $32,%rdx; or %rax,%rdx              the TSC, inside the sequence: a
//                                                          preempted record is stamped again
//           tsc >> 24 != sync_tsc, sp >> 24 != sync_sp?    to need_sync
//           slot = data + (head & (capacity-1)) -> %rax; tsc & sp's low 24 bits | id | exit,
//           values
//           add $record_size,%rsi; mov %rsi,(%rcx)         the commit
//   post_commit:
//           test $(subbuffer-1),%esi; jz wake               it filled a sub-buffer
//   done:
//
// Cold, out of the sequence (a system call inside one is not allowed):
//   need_sync: a sequence of its own: control block, head; at a sub-buffer's first record, is
//           the reader done with it (else to full)? sync_at = head first (the words are not a
//           sync's until the commit: an abort leaves sync_at equal to the head, which the next
//           writer refuses), sync_tsc, sync_sp, the sync record, sync_tp; the commit; to
//           sync_wake if it filled a sub-buffer; back to arm for the call's own record
//   wake:   lock incl wake; if the reader sleeps, futex(&wake, FUTEX_WAKE, 1); jmp done
//   full:   blocking off: to dropped. Else lock incq waiting(%rcx); if consumed has not moved,
//           futex(&consumed, FUTEX_WAIT, consumed, &bound), and on ETIMEDOUT blocking = 0 (the
//           reader is gone or stuck: nobody waits for it again); lock decq waiting; to arm
//   dropped: lost[id]++ (an exit's: lost[max_ids + id]) in a sequence of its own; jmp done
// A stack snapshot (stack_code.cpp) takes the old path: no syncs, a room check at each
// sub-buffer's first record, its own words.
#include <linux/futex.h>
#include <sys/syscall.h>

#include <cerrno>
#include <limits>

#include "breakpoint/in_tracee/trampoline_code.hpp"
#include "common/error.hpp"

namespace probecost::tramp {

using namespace x86;

ZydisEncoderOperand Frame::original(ZydisRegister r) const {
  for (const auto& [reg_saved, offset] : saved) {
    if (reg_saved == r) return mem(RSP, offset);
  }
  return reg(r);
}

void arm_rseq(Assembler& a, std::int32_t rseq_offset, const Sequence& in, Sequence& out) {
  out.arm = a.here();
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RAX), rip(in.descriptor)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(ZYDIS_REGISTER_NONE, rseq_offset + 8), reg(RAX)}, kFs);
}

void emit_abort(Assembler& a, const Sequence& in, Sequence& out) {
  constexpr std::uint8_t kRseqSig[] = {0x53, 0x30, 0x05, 0x53};  // 0x53053053, glibc's RSEQ_SIG
  a.raw(kRseqSig);
  out.abort = a.here();
  a.branch32(ZYDIS_MNEMONIC_JMP, in.arm);
}

void emit_descriptor(Assembler& a, const Sequence& in, Sequence& out) {
  constexpr std::uint8_t kInt3Byte = 0xCC;
  while (a.here().value() % 32) a.raw(std::array<std::uint8_t, 1>{kInt3Byte});
  out.descriptor = a.here();
  std::uint64_t cs[4] = {0, in.start.value(), static_cast<std::uint64_t>(in.post_commit - in.start),
                         in.abort.value()};
  a.raw({reinterpret_cast<const std::uint8_t*>(cs), sizeof cs});
}

ZydisEncoderOperand reach(Assembler& a, RuntimeAddr at, RuntimeAddr target, ZydisRegister scratch) {
  constexpr std::int64_t kTrampolineMax = 4096;
  if (within_rel32(at, target, kTrampolineMax)) return rip(target);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(scratch), imm(static_cast<std::int64_t>(target.value()))});
  return mem(scratch, 0);
}

namespace {

void must_jump(Assembler& a, ZydisMnemonic m, RuntimeAddr to) {
  if (!a.branch32(m, to)) throw Error("call record code: a branch out of reach");
}

// %rcx = this CPU's control block; to `no_cpu` for a thread with no rseq registration
// (cpu_id -1) or a CPU beyond the buffers.
void control_block(Assembler& a, const TrampolineSpec& spec, const Rseq& in) {
  const CallRecordTarget& t = *spec.calls;
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EAX), mem(ZYDIS_REGISTER_NONE, t.rseq_offset + 4, 4)}, kFs);
  a.must(ZYDIS_MNEMONIC_CMP, {reg(EAX), imm(t.layout.cpus)});
  must_jump(a, ZYDIS_MNEMONIC_JNB, in.no_cpu);
  a.must(ZYDIS_MNEMONIC_SHL, {reg(RAX), imm(t.layout.ctl_shift)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RCX), imm(static_cast<std::int64_t>(t.control.value()))});
  a.must(ZYDIS_MNEMONIC_ADD, {reg(RCX), reg(RAX)});
}

// The header page's words (call_buffer.hpp), in the tracee.
std::int64_t header_word(const CallRecordTarget& t, std::uint32_t offset) {
  return static_cast<std::int64_t>(t.control.value() - t.layout.ctl_offset + offset);
}

// futex(2) from a trampoline: %rax, %rcx, %rdx, %rsi are the body's (saved), and the system
// call clobbers %rcx and %r11; %rdi and %r10 carry arguments. The flags come back as they were
// (sysret restores them from %r11), and the body saves them anyway.
void syscall_futex(Assembler& a) {
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EAX), imm(SYS_futex)});
  a.must(ZYDIS_MNEMONIC_SYSCALL, {});
}

std::int64_t lost_offset(const CallRecordTarget& t, bool exit) {
  return static_cast<std::int64_t>(t.layout.lost_offset(t.id, exit));
}

// At a sub-buffer's first record (head in %rsi): to `full` unless the reader has consumed the
// whole sub-buffer.
void check_room(Assembler& a, const jump::CallBufferLayout& l, const Rseq& in, RuntimeAddr write) {
  a.must(ZYDIS_MNEMONIC_TEST, {reg(ESI), imm(static_cast<std::int64_t>(l.subbuffer - 1))});
  must_jump(a, ZYDIS_MNEMONIC_JNZ, write);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), reg(RSI)});
  a.must(ZYDIS_MNEMONIC_SUB, {reg(RAX), mem(RCX, jump::kConsumedOffset)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), imm(static_cast<std::int64_t>(l.capacity - l.subbuffer))});
  must_jump(a, ZYDIS_MNEMONIC_JNBE, in.full);
}

// %rax = this CPU's slot at the head (%rsi).
void slot_at_head(Assembler& a, const jump::CallBufferLayout& l) {
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EAX), reg(ESI)});
  a.must(ZYDIS_MNEMONIC_AND, {reg(EAX), imm(static_cast<std::int64_t>(l.capacity - 1))});
  a.must(ZYDIS_MNEMONIC_ADD, {reg(RAX), mem(RCX, jump::kDataPointerOffset)});
}

void rdtsc_to_rdx(Assembler& a) {
  a.must(ZYDIS_MNEMONIC_RDTSC, {});
  a.must(ZYDIS_MNEMONIC_SHL, {reg(RDX), imm(32)});
  a.must(ZYDIS_MNEMONIC_OR, {reg(RDX), reg(RAX)});
}

// %rax = the site's %rsp >> 24: the stack window.
void stack_window(Assembler& a, const Frame& frame) {
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RAX), mem(RSP, frame.above)});
  a.must(ZYDIS_MNEMONIC_SHR, {reg(RAX), imm(jump::kWindowBits)});
}

// To `need_sync` unless this CPU's last committed record of the sub-buffer at the head (%rsi)
// is a sync of this thread, of this TSC window and stack window; the TSC in %rdx after.
void check_sync(Assembler& a, const jump::CallBufferLayout& l, const Frame& frame, const Rseq& in) {
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), mem(RCX, jump::kSyncAtOffset)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), reg(RSI)});
  must_jump(a, ZYDIS_MNEMONIC_JZ, in.need_sync);
  a.must(ZYDIS_MNEMONIC_XOR, {reg(RAX), reg(RSI)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), imm(static_cast<std::int64_t>(l.subbuffer))});
  must_jump(a, ZYDIS_MNEMONIC_JNB, in.need_sync);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), mem(ZYDIS_REGISTER_NONE, 0)}, kFs);  // the TCB's self
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), mem(RCX, jump::kSyncTpOffset)});
  must_jump(a, ZYDIS_MNEMONIC_JNZ, in.need_sync);
  rdtsc_to_rdx(a);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_SHR, {reg(RAX), imm(jump::kWindowBits)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), mem(RCX, jump::kSyncTscOffset)});
  must_jump(a, ZYDIS_MNEMONIC_JNZ, in.need_sync);
  stack_window(a, frame);
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), mem(RCX, jump::kSyncSpOffset)});
  must_jump(a, ZYDIS_MNEMONIC_JNZ, in.need_sync);
}

// The event's words (the TSC in %rdx): {tsc and sp's low 24 bits, id, exit}, then the values.
void write_event(Assembler& a, const TrampolineSpec& spec, bool exit, const Frame& frame) {
  const CallRecordTarget& t = *spec.calls;
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RAX), mem(RSP, frame.above)});
  a.must(ZYDIS_MNEMONIC_SHL, {reg(RAX), imm(64 - jump::kWindowBits)});
  a.must(ZYDIS_MNEMONIC_SHR, {reg(RAX), imm(64 - 2 * jump::kWindowBits)});
  a.must(ZYDIS_MNEMONIC_AND, {reg(EDX), imm(static_cast<std::int64_t>(jump::kWindowMask))});
  a.must(ZYDIS_MNEMONIC_OR, {reg(RDX), reg(RAX)});
  slot_at_head(a, t.layout);
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 0), reg(RDX)});
  // Bits 48-63: the id and the exit bit (bit 63, a sync's, clear).
  auto header = static_cast<std::int16_t>(t.id | (exit ? 0x4000u : 0u));
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 6, 2), imm(header)});
  static constexpr ZydisRegister kArgs[] = {RDI, RSI, RDX, RCX, R8, R9};
  int values = exit ? 1 : t.layout.args;
  for (int i = 0; i < values; ++i) {
    ZydisEncoderOperand from = frame.original(exit ? RAX : kArgs[i]);
    if (from.type == ZYDIS_OPERAND_TYPE_MEMORY) {
      a.must(ZYDIS_MNEMONIC_MOV, {reg(RDX), from});
      from = reg(RDX);
    }
    a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 8 + 8 * i), from});
  }
}

}  // namespace

void emit_call_record(Assembler& a, const TrampolineSpec& spec, bool exit, const Frame& frame,
                      const Rseq& in, Rseq& out) {
  const jump::CallBufferLayout& l = spec.calls->layout;
  if (l.capacity > (1ull << 31)) throw Error("call record code: a ring above 2 GiB");
  const bool snapshot = l.stack_bytes != 0;
  if (snapshot && exit) throw Error("call record code: a stack snapshot at an exit");
  RuntimeAddr again = a.here();
  if (snapshot) emit_snapshot_prologue(a);
  arm_rseq(a, spec.calls->rseq_offset, in.main, out.main);
  // A snapshot's abort starts over from the prologue: the copy moves %rdi, where the prologue
  // left DF, and a sequence aborted inside the copy then took it for DF set (no copy, and a
  // wrong reason). The flags are read again; the thread's DF is the site's still.
  if (snapshot) out.main.arm = again;
  out.main.start = a.here();
  control_block(a, spec, in);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RSI), mem(RCX, jump::kHeadOffset)});
  if (snapshot) {
    // `write` comes right after the room check, whose length does not depend on where it is.
    Assembler probe(a.here());
    check_room(probe, l, in, a.here());
    check_room(a, l, in, a.here() + static_cast<std::int64_t>(probe.size()));
    rdtsc_to_rdx(a);
    slot_at_head(a, l);
    emit_snapshot(a, *spec.calls, frame);
  } else {
    // A call record starts no sub-buffer (a sync does): its room was checked by that sync.
    check_sync(a, l, frame, in);
    write_event(a, spec, exit, frame);
  }
  a.must(ZYDIS_MNEMONIC_ADD, {reg(RSI), imm(l.record_size)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RCX, jump::kHeadOffset), reg(RSI)});  // the commit
  out.main.post_commit = a.here();
  a.must(ZYDIS_MNEMONIC_TEST, {reg(ESI), imm(static_cast<std::int64_t>(l.subbuffer - 1))});
  must_jump(a, ZYDIS_MNEMONIC_JZ, in.wake);
  out.done = a.here();
}

namespace {

// A sub-buffer filled: the reader is woken (its wake word bumped first, so a reader about to
// wait on the old value does not sleep through it).
void emit_wake(Assembler& a, const CallRecordTarget& t, RuntimeAddr& at, RuntimeAddr back) {
  at = a.here();
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), imm(header_word(t, jump::kWakeOffset))});
  a.must(ZYDIS_MNEMONIC_INC, {mem(RAX, 0, 4)}, kLock);
  // A reader that is not asleep sees the bump before it waits (call_buffer.cpp): no wake.
  a.must(
      ZYDIS_MNEMONIC_CMP,
      {mem(RAX, static_cast<std::int64_t>(jump::kSleepingOffset) - jump::kWakeOffset, 4), imm(0)});
  must_jump(a, ZYDIS_MNEMONIC_JZ, back);
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(RDI)});
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(R11)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RDI), reg(RAX)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ESI), imm(FUTEX_WAKE)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EDX), imm(1)});
  syscall_futex(a);
  a.must(ZYDIS_MNEMONIC_POP, {reg(R11)});
  a.must(ZYDIS_MNEMONIC_POP, {reg(RDI)});
  must_jump(a, ZYDIS_MNEMONIC_JMP, back);
}

// The sync record a call record needs first (call_buffer.hpp), in a sequence of its own, then
// back to the call record's sequence. At a sub-buffer's first record it checks for room (the
// wait and the drop are the call record's: a dropped sync drops the call's record).
void emit_sync(Assembler& a, const TrampolineSpec& spec, const Frame& frame, const Rseq& in,
               Rseq& out) {
  const CallRecordTarget& t = *spec.calls;
  const jump::CallBufferLayout& l = t.layout;
  out.need_sync = a.here();
  arm_rseq(a, t.rseq_offset, in.sync, out.sync);
  out.sync.start = a.here();
  control_block(a, spec, in);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RSI), mem(RCX, jump::kHeadOffset)});
  Assembler probe(a.here());
  check_room(probe, l, in, a.here());
  check_room(a, l, in, a.here() + static_cast<std::int64_t>(probe.size()));
  // sync_at first: until the commit, the words below are no sync's (an abort leaves sync_at
  // equal to the head, which check_sync refuses).
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RCX, jump::kSyncAtOffset), reg(RSI)});
  rdtsc_to_rdx(a);
  a.must(ZYDIS_MNEMONIC_SHR, {reg(RDX), imm(jump::kWindowBits)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RCX, jump::kSyncTscOffset), reg(RDX)});
  stack_window(a, frame);
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RCX, jump::kSyncSpOffset), reg(RAX)});
  a.must(ZYDIS_MNEMONIC_SHL, {reg(RAX), imm(jump::kSyncSpShift)});
  a.must(ZYDIS_MNEMONIC_OR, {reg(RDX), reg(RAX)});
  a.must(ZYDIS_MNEMONIC_BTS, {reg(RDX), imm(63)});
  slot_at_head(a, l);
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 0), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RDX), mem(ZYDIS_REGISTER_NONE, 0)}, kFs);  // the TCB's self
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RAX, 8), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RCX, jump::kSyncTpOffset), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_ADD, {reg(RSI), imm(l.record_size)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RCX, jump::kHeadOffset), reg(RSI)});  // the commit
  out.sync.post_commit = a.here();
  a.must(ZYDIS_MNEMONIC_TEST, {reg(ESI), imm(static_cast<std::int64_t>(l.subbuffer - 1))});
  must_jump(a, ZYDIS_MNEMONIC_JZ, in.sync_wake);
  must_jump(a, ZYDIS_MNEMONIC_JMP, in.main.arm);
  emit_wake(a, t, out.sync_wake, in.main.arm);
  emit_abort(a, in.sync, out.sync);
}

// No room (%rcx this CPU's control block, %rsi the head the sequence read): wait for the
// reader, bounded, then start the record again; with blocking off, drop it.
void emit_wait(Assembler& a, const CallRecordTarget& t, const jump::CallBufferLayout& l,
               const Rseq& in, Rseq& out) {
  out.full = a.here();
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), imm(header_word(t, jump::kBlockingOffset))});
  a.must(ZYDIS_MNEMONIC_CMP, {mem(RAX, 0, 4), imm(0)});
  must_jump(a, ZYDIS_MNEMONIC_JZ, in.dropped);
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(RDI)});
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(R10)});
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(R11)});
  a.must(ZYDIS_MNEMONIC_INC, {mem(RCX, jump::kWaitingOffset)}, kLock);
  // Loaded after our increment (a locked instruction is a full barrier): the reader either
  // sees us waiting or has moved consumed before this load.
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RDX), mem(RCX, jump::kConsumedOffset)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), reg(RSI)});
  a.must(ZYDIS_MNEMONIC_SUB, {reg(RAX), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), imm(static_cast<std::int64_t>(l.capacity - l.subbuffer))});
  must_jump(a, ZYDIS_MNEMONIC_JBE, in.waited);  // room since: no wait
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(RCX)});
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RDI), mem(RCX, jump::kConsumedOffset)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ESI), imm(FUTEX_WAIT)});  // %edx: consumed's low half
  a.must(ZYDIS_MNEMONIC_MOV, {reg(R10), imm(header_word(t, jump::kWaitBoundOffset))});
  syscall_futex(a);
  a.must(ZYDIS_MNEMONIC_POP, {reg(RCX)});
  a.must(ZYDIS_MNEMONIC_CMP, {reg(RAX), imm(-ETIMEDOUT)});
  must_jump(a, ZYDIS_MNEMONIC_JNZ, in.waited);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(RDX), imm(header_word(t, jump::kBlockingOffset))});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RDX, 0, 4), imm(0)});
  out.waited = a.here();
  a.must(ZYDIS_MNEMONIC_DEC, {mem(RCX, jump::kWaitingOffset)}, kLock);
  a.must(ZYDIS_MNEMONIC_POP, {reg(R11)});
  a.must(ZYDIS_MNEMONIC_POP, {reg(R10)});
  a.must(ZYDIS_MNEMONIC_POP, {reg(RDI)});
  must_jump(a, ZYDIS_MNEMONIC_JMP, in.main.arm);
}

}  // namespace

void emit_call_record_cold(Assembler& a, const TrampolineSpec& spec, bool exit, const Frame& frame,
                           const Rseq& in, Rseq& out) {
  const CallRecordTarget& t = *spec.calls;
  emit_abort(a, in.main, out.main);
  emit_wake(a, t, out.wake, in.done);
  if (!t.layout.stack_bytes) emit_sync(a, spec, frame, in, out);
  emit_wait(a, t, t.layout, in, out);
  // No room and no wait: the record is dropped and counted in this CPU's lost word of the
  // probe's entries or exits (this code is the one or the other's), in a sequence of its own (the
  // record's is over: the thread may have moved CPU since). Its commit is the increment.
  out.dropped = a.here();
  arm_rseq(a, t.rseq_offset, in.drop, out.drop);
  out.drop.start = a.here();
  control_block(a, spec, in);
  a.must(ZYDIS_MNEMONIC_INC, {mem(RCX, lost_offset(t, exit))});
  out.drop.post_commit = a.here();
  must_jump(a, ZYDIS_MNEMONIC_JMP, in.done);
  emit_abort(a, in.drop, out.drop);
  // A thread with no CPU buffer (no rseq registration): counted with a locked increment, in
  // the last control block (rare: glibc registers every thread it makes).
  out.no_cpu = a.here();
  RuntimeAddr no_cpu_block = t.control + static_cast<std::int64_t>(t.layout.cpus) *
                                             static_cast<std::int64_t>(t.layout.ctl_stride());
  a.must(ZYDIS_MNEMONIC_INC, {reach(a, a.here(), no_cpu_block + lost_offset(t, exit), RCX)}, kLock);
  must_jump(a, ZYDIS_MNEMONIC_JMP, in.done);
  emit_descriptor(a, in.main, out.main);
  emit_descriptor(a, in.drop, out.drop);
  if (!t.layout.stack_bytes) emit_descriptor(a, in.sync, out.sync);
}

}  // namespace probecost::tramp
