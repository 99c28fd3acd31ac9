#include "breakpoint/trampoline.hpp"

#include <algorithm>

#include "breakpoint/event_ring.hpp"
#include "breakpoint/relocate.hpp"
#include "breakpoint/x86_asm.hpp"
#include "common/error.hpp"

namespace probecost {

namespace {

using namespace x86;

constexpr std::uint8_t kInt3Byte = 0xCC;
constexpr std::int64_t kRedZone = 128;  // SysV ABI: below %rsp, a leaf function's to use
constexpr ZydisInstructionAttributes kLock = ZYDIS_ATTRIB_HAS_LOCK;

// Whether data at `target` is in RIP-relative reach of a whole trampoline at `at`: decided once
// per trampoline, so that which registers it saves and how it addresses agree.
bool near(RuntimeAddr at, RuntimeAddr target) {
  constexpr std::int64_t kTrampolineMax = 4096;
  return within_rel32(at, target, kTrampolineMax);
}

// The operand for the 8 bytes at `target`: RIP-relative if in reach, else through `scratch`
// loaded with the absolute address.
ZydisEncoderOperand reach(Assembler& a, RuntimeAddr target, ZydisRegister scratch, bool is_near) {
  if (is_near) return rip(target);
  a.must(ZYDIS_MNEMONIC_MOV, {reg(scratch), imm(static_cast<std::int64_t>(target.value()))});
  return mem(scratch, 0);
}

constexpr auto RAX = ZYDIS_REGISTER_RAX, RCX = ZYDIS_REGISTER_RCX, RDX = ZYDIS_REGISTER_RDX,
               RSI = ZYDIS_REGISTER_RSI, RDI = ZYDIS_REGISTER_RDI, RSP = ZYDIS_REGISTER_RSP,
               EAX = ZYDIS_REGISTER_EAX, ECX = ZYDIS_REGISTER_ECX, EDX = ZYDIS_REGISTER_EDX,
               AL = ZYDIS_REGISTER_AL;

// The register that holds the absolute address of an operand out of RIP-relative reach: RSI,
// never RAX (which holds the saved flags when they are kept).
constexpr auto kScratch = RSI;

// %rcx = the hit's position (the hit counter, incremented), %rax = TSC. The position comes
// from the hit counter: the one locked instruction of the hit.
void take_position_and_time(Assembler& a, const TrampolineSpec& spec) {
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ECX), imm(1)});
  a.must(ZYDIS_MNEMONIC_XADD,
         {reach(a, spec.hit_counter, kScratch, near(spec.address, spec.hit_counter)), reg(RCX)},
         kLock);
  a.must(ZYDIS_MNEMONIC_RDTSC, {});  // edx:eax; not ordered with the xadd, nor needs to be
  a.must(ZYDIS_MNEMONIC_SHL, {reg(RDX), imm(32)});
  a.must(ZYDIS_MNEMONIC_OR, {reg(RAX), reg(RDX)});
}

// %rsi = slots + (position & (capacity - 1)) * 24; clobbers %rdx.
void slot_address(Assembler& a, const TrampolineSpec& spec) {
  const EventTarget& ev = *spec.events;
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EDX), reg(ECX)});
  a.must(ZYDIS_MNEMONIC_AND, {reg(EDX), imm(static_cast<std::int64_t>(ev.capacity - 1))});
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RDX), mem(RDX, 0, 8, RDX, 2)});
  if (near(spec.address, ev.slots)) {
    a.must(ZYDIS_MNEMONIC_LEA, {reg(RSI), rip(ev.slots)});
  } else {
    a.must(ZYDIS_MNEMONIC_MOV, {reg(RSI), imm(static_cast<std::int64_t>(ev.slots.value()))});
  }
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RSI), mem(RSI, 0, 8, RDX, 8)});
}

// One record into the site's ring (see event_ring.hpp for the protocol). On entry nothing is live
// in rax, rcx, rdx, rsi; %rdi is the site's.
void emit_record(Assembler& a, const TrampolineSpec& spec) {
  take_position_and_time(a, spec);
  slot_address(a, spec);
  // seq = 0 first, the commit word last: x86 makes stores visible in program order.
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RSI, jump::kSeqOffset, 4), imm(0)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RSI, 0), reg(RAX)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RSI, 8), reg(RDI)});
  // {id, seq} in one store: seq = 2 * position + 1 (32 bits) in the high half.
  a.must(ZYDIS_MNEMONIC_LEA, {reg(ECX), mem(RCX, 1, 8, RCX, 1)});
  a.must(ZYDIS_MNEMONIC_SHL, {reg(RCX), imm(32)});
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EDX), imm(spec.events->id)});
  a.must(ZYDIS_MNEMONIC_OR, {reg(RCX), reg(RDX)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RSI, jump::kCommitOffset), reg(RCX)});
}

// The registers the body writes, in push order.
std::vector<ZydisRegister> clobbered(const TrampolineSpec& spec) {
  if (spec.events) return {RAX, RCX, RDX, RSI};
  std::vector<ZydisRegister> out;
  if (spec.per_cpu) out = {RAX, RCX};
  if (!near(spec.address, spec.hit_counter)) out.push_back(kScratch);
  return out;
}

// Where the per-CPU counting code jumps: found by a first pass, used by the second (every branch
// is rel32 and every RIP-relative operand disp32, so the layout does not depend on them).
struct Labels {
  RuntimeAddr arm, start, post_commit, abort, fallback, descriptor;
  bool operator==(const Labels&) const = default;
};

void lock_inc_counter(Assembler& a, const TrampolineSpec& spec) {
  a.must(ZYDIS_MNEMONIC_INC,
         {reach(a, spec.hit_counter, kScratch, near(spec.address, spec.hit_counter))}, kLock);
}

// Counting without a locked instruction: each CPU has its own counter, and a restartable sequence
// (rseq(2), which glibc >= 2.35 registers for every thread) makes "read my CPU number, increment
// its counter" atomic with respect to preemption, migration and signals: if any comes between
// the two, the kernel sends the thread to `abort`, which starts over. The increment is the
// commit. A thread without rseq (cpu_id < 0) or on a CPU beyond the row counts with lock inc.
void emit_per_cpu_count(Assembler& a, const TrampolineSpec& spec, const Labels& in, Labels& out) {
  const PerCpuCounter& pc = *spec.per_cpu;
  const std::int64_t rseq_cs = pc.rseq_offset + 8, cpu_id = pc.rseq_offset + 4;
  constexpr ZydisInstructionAttributes kFs = ZYDIS_ATTRIB_HAS_SEGMENT_FS;
  out.arm = a.here();  // rseq->rseq_cs = &descriptor (the kernel clears it when it aborts)
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RAX), rip(in.descriptor)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(ZYDIS_REGISTER_NONE, rseq_cs), reg(RAX)}, kFs);
  out.start = a.here();
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EAX), mem(ZYDIS_REGISTER_NONE, cpu_id, 4)}, kFs);
  a.must(ZYDIS_MNEMONIC_CMP, {reg(EAX), imm(pc.cpus)});
  if (!a.branch32(ZYDIS_MNEMONIC_JNB, in.fallback)) throw Error("per-CPU fallback out of reach");
  a.must(ZYDIS_MNEMONIC_SHL, {reg(EAX), imm(6)});  // 64 bytes per counter: no false sharing
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RCX), rip(pc.counters)});
  a.must(ZYDIS_MNEMONIC_INC, {mem(RCX, 0, 8, RAX, 1)});  // the commit
  out.post_commit = a.here();
}

// After the jump back: what the per-CPU path reaches only when it must.
void emit_per_cpu_cold(Assembler& a, const TrampolineSpec& spec, const Labels& in, Labels& out) {
  // The kernel checks these 4 bytes before an abort address against the signature the thread
  // registered (glibc: RSEQ_SIG, 0x53053053 on x86).
  constexpr std::uint8_t kRseqSig[] = {0x53, 0x30, 0x05, 0x53};
  a.raw(kRseqSig);
  out.abort = a.here();
  a.branch32(ZYDIS_MNEMONIC_JMP, in.arm);
  out.fallback = a.here();
  lock_inc_counter(a, spec);
  a.branch32(ZYDIS_MNEMONIC_JMP, in.post_commit);
  while (a.here().value() % 32) a.raw(std::array<std::uint8_t, 1>{kInt3Byte});
  // struct rseq_cs {u32 version, flags; u64 start_ip, post_commit_offset, abort_ip}, 32-aligned.
  out.descriptor = a.here();
  std::uint64_t cs[4] = {0, in.start.value(), static_cast<std::uint64_t>(in.post_commit - in.start),
                         in.abort.value()};
  a.raw({reinterpret_cast<const std::uint8_t*>(cs), sizeof cs});
}

// lock inc and lock xadd write the six status flags, and nothing says they are dead where the
// jump goes: the ABI gives a callee no flags to rely on, but hand-written code may (a routine
// that returns its caller's CF), and mid-function they may be live. pushfq/popfq keeps them but
// popfq is slow (about 9 ns here, against 0.2 for this): lahf copies SF ZF AF PF CF into %ah,
// seto copies OF into %al; on the way out `add $0x7f,%al` sets OF again exactly when %al was 1,
// and sahf (which leaves OF alone) puts the other five back. DF is not touched.
void save_flags(Assembler& a, FlagSave how) {
  if (how == FlagSave::Pushfq) {
    a.must(ZYDIS_MNEMONIC_PUSHFQ, {});
    return;
  }
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(RAX)});
  a.must(ZYDIS_MNEMONIC_LAHF, {});
  a.must(ZYDIS_MNEMONIC_SETO, {reg(AL)});
  a.must(ZYDIS_MNEMONIC_PUSH, {reg(RAX)});
}

void restore_flags(Assembler& a, FlagSave how) {
  if (how == FlagSave::Pushfq) {
    a.must(ZYDIS_MNEMONIC_POPFQ, {});
    return;
  }
  a.must(ZYDIS_MNEMONIC_POP, {reg(RAX)});
  a.must(ZYDIS_MNEMONIC_ADD, {reg(AL), imm(0x7f)});
  a.must(ZYDIS_MNEMONIC_SAHF, {});
  a.must(ZYDIS_MNEMONIC_POP, {reg(RAX)});
}

void emit_body(Assembler& a, const TrampolineSpec& spec, const Labels& in, Labels& out) {
  auto saved = clobbered(spec);
  const bool flags = spec.flag_save != FlagSave::None;
  // With the flags saved by lahf, %rax is on the stack already and free for the body.
  if (spec.flag_save == FlagSave::Lahf) std::erase(saved, RAX);
  // A push writes below %rsp, which may be a leaf function's red zone in use: step over it with
  // lea, which unlike sub leaves the flags alone.
  bool pushes = !saved.empty() || flags;
  if (pushes) a.must(ZYDIS_MNEMONIC_LEA, {reg(RSP), mem(RSP, -kRedZone)});
  if (flags) save_flags(a, spec.flag_save);
  for (auto r : saved) a.must(ZYDIS_MNEMONIC_PUSH, {reg(r)});
  if (spec.events) {
    emit_record(a, spec);
  } else if (spec.per_cpu) {
    emit_per_cpu_count(a, spec, in, out);
  } else {
    lock_inc_counter(a, spec);
  }
  for (auto r = saved.rbegin(); r != saved.rend(); ++r) a.must(ZYDIS_MNEMONIC_POP, {reg(*r)});
  if (flags) restore_flags(a, spec.flag_save);
  if (pushes) a.must(ZYDIS_MNEMONIC_LEA, {reg(RSP), mem(RSP, kRedZone)});
}

}  // namespace

std::optional<RuntimeAddr> Trampoline::moved_pc(RuntimeAddr pc) const {
  for (const auto& [original, copy] : copies) {
    if (original == pc) return copy;
  }
  return std::nullopt;
}

namespace {

std::optional<Trampoline> generate(const JumpPlan& plan, const TrampolineSpec& spec,
                                   const Labels& in, Labels& out, std::string& why) {
  Assembler a(spec.address);
  emit_body(a, spec, in, out);
  auto block = relocate_block(plan.covered, a.here(), why);
  if (!block) return std::nullopt;
  a.raw(block->bytes);
  if (spec.per_cpu && !spec.events) emit_per_cpu_cold(a, spec, in, out);
  Trampoline t{spec.address, a.bytes(), {}, block->at};
  for (std::size_t i = 1; i < plan.covered.size(); ++i) {
    t.copies.emplace_back(plan.covered[i].address, block->at + block->offsets[i]);
  }
  return t;
}

}  // namespace

std::optional<Trampoline> build_trampoline(const JumpPlan& plan, const TrampolineSpec& spec,
                                           std::string& why) {
  if (spec.per_cpu && !near(spec.address, spec.per_cpu->counters)) {
    why = "per-CPU counters out of RIP-relative reach of the trampoline";
    return std::nullopt;
  }
  Labels guess{spec.address, spec.address, spec.address, spec.address, spec.address, spec.address};
  Labels found = guess;
  if (!generate(plan, spec, guess, found, why)) return std::nullopt;
  Labels check = found;
  auto t = generate(plan, spec, found, check, why);
  if (t && check != found) throw Error("trampoline layout changed between passes");
  return t;
}

}  // namespace probecost
