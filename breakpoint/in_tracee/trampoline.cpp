#include "breakpoint/in_tracee/trampoline.hpp"

#include <algorithm>

#include "breakpoint/in_tracee/event_ring.hpp"
#include "breakpoint/in_tracee/trampoline_code.hpp"
#include "breakpoint/x86/relocate.hpp"
#include "common/error.hpp"

namespace probecost {

namespace {

using namespace x86;
using namespace tramp;

constexpr std::int64_t kRedZone = 128;  // SysV ABI: below %rsp, a leaf function's to use

// Whether data at `target` is in RIP-relative reach of a whole trampoline at `at`: decided once
// per trampoline, so that which registers it saves and how it addresses agree.
bool near(RuntimeAddr at, RuntimeAddr target) {
  constexpr std::int64_t kTrampolineMax = 4096;
  return within_rel32(at, target, kTrampolineMax);
}

// The register that holds the absolute address of an operand out of RIP-relative reach: RSI,
// never RAX (which holds the saved flags when they are kept).
constexpr auto kScratch = RSI;

// What one body does: count the hit, write the marker's record, a call record, or the stack
// snapshot that comes before an entry record (`probecost record --stacks`).
enum class Work { Count, Event, Entry, Exit, Snapshot };

// A snapshot body writes into spec.stacks with the call record's code (its layout says what).
TrampolineSpec snapshot_spec(const TrampolineSpec& spec) {
  TrampolineSpec s = spec;
  s.calls = spec.stacks;
  s.stacks.reset();
  return s;
}

// %rcx = the hit's position (the hit counter, incremented), %rax = TSC. The position comes
// from the hit counter: the one locked instruction of the hit.
void take_position_and_time(Assembler& a, const TrampolineSpec& spec) {
  a.must(ZYDIS_MNEMONIC_MOV, {reg(ECX), imm(1)});
  a.must(ZYDIS_MNEMONIC_XADD, {reach(a, spec.address, spec.hit_counter, kScratch), reg(RCX)},
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
std::vector<ZydisRegister> clobbered(const TrampolineSpec& spec, Work work) {
  if (work == Work::Snapshot || (work == Work::Entry && spec.calls->layout.stack_bytes))
    return {RAX, RCX, RDX, RSI, RDI, R8, R9, R10, R11};
  if (work != Work::Count) return {RAX, RCX, RDX, RSI};
  std::vector<ZydisRegister> out;
  if (spec.per_cpu) out = {RAX, RCX};
  if (!near(spec.address, spec.hit_counter)) out.push_back(kScratch);
  return out;
}

void lock_inc_counter(Assembler& a, const TrampolineSpec& spec) {
  a.must(ZYDIS_MNEMONIC_INC, {reach(a, spec.address, spec.hit_counter, kScratch)}, kLock);
}

// Counting without a locked instruction: each CPU has its own counter, and a restartable sequence
// (rseq(2), which glibc >= 2.35 registers for every thread) makes "read my CPU number, increment
// its counter" atomic with respect to preemption, migration and signals: if any comes between
// the two, the kernel sends the thread to `abort`, which starts over. The increment is the
// commit. A thread without rseq (cpu_id < 0) or on a CPU beyond the row counts with lock inc.
void emit_per_cpu_count(Assembler& a, const TrampolineSpec& spec, const Rseq& in, Rseq& out) {
  const PerCpuCounter& pc = *spec.per_cpu;
  arm_rseq(a, pc.rseq_offset, in.main, out.main);
  out.main.start = a.here();
  a.must(ZYDIS_MNEMONIC_MOV, {reg(EAX), mem(ZYDIS_REGISTER_NONE, pc.rseq_offset + 4, 4)}, kFs);
  a.must(ZYDIS_MNEMONIC_CMP, {reg(EAX), imm(pc.cpus)});
  if (!a.branch32(ZYDIS_MNEMONIC_JNB, in.no_cpu)) throw Error("per-CPU fallback out of reach");
  a.must(ZYDIS_MNEMONIC_SHL, {reg(EAX), imm(6)});  // 64 bytes per counter: no false sharing
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RCX), rip(pc.counters)});
  a.must(ZYDIS_MNEMONIC_INC, {mem(RCX, 0, 8, RAX, 1)});  // the commit
  out.main.post_commit = a.here();
}

// After the jump back: what the per-CPU path reaches only when it must.
void emit_per_cpu_cold(Assembler& a, const TrampolineSpec& spec, const Rseq& in, Rseq& out) {
  emit_abort(a, in.main, out.main);
  out.no_cpu = a.here();
  lock_inc_counter(a, spec);
  a.branch32(ZYDIS_MNEMONIC_JMP, in.main.post_commit);
  emit_descriptor(a, in.main, out.main);
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

// The pushes a body makes, in order (0 stands for the flags), and where they leave each
// original register.
Frame frame_of(const std::vector<ZydisRegister>& pushes) {
  Frame f;
  auto n = static_cast<std::int64_t>(pushes.size());
  f.above = kRedZone + 8 * n;
  for (std::int64_t i = 0; i < n; ++i) {
    if (pushes[i] != ZYDIS_REGISTER_NONE) f.saved.emplace_back(pushes[i], 8 * (n - 1 - i));
  }
  return f;
}

// Returns where the body's saves are (its cold code runs on the same stack).
Frame emit_body(Assembler& a, const TrampolineSpec& spec, Work work, const Rseq& in, Rseq& out) {
  auto saved = clobbered(spec, work);
  const bool flags = spec.flag_save != FlagSave::None;
  // With the flags saved by lahf, %rax is on the stack already and free for the body.
  if (spec.flag_save == FlagSave::Lahf) std::erase(saved, RAX);
  std::vector<ZydisRegister> pushes;
  if (spec.flag_save == FlagSave::Lahf) pushes = {RAX, ZYDIS_REGISTER_NONE};
  if (spec.flag_save == FlagSave::Pushfq) pushes = {ZYDIS_REGISTER_NONE};
  pushes.insert(pushes.end(), saved.begin(), saved.end());
  // A push writes below %rsp, which may be a leaf function's red zone in use: step over it with
  // lea, which unlike sub leaves the flags alone.
  bool any = !pushes.empty();
  if (any) a.must(ZYDIS_MNEMONIC_LEA, {reg(RSP), mem(RSP, -kRedZone)});
  if (flags) save_flags(a, spec.flag_save);
  for (auto r : saved) a.must(ZYDIS_MNEMONIC_PUSH, {reg(r)});
  switch (work) {
    case Work::Event:
      emit_record(a, spec);
      break;
    case Work::Entry:
    case Work::Exit:
      emit_call_record(a, spec, work == Work::Exit, frame_of(pushes), in, out);
      // A probe that takes stacks counts its hits as well: exact, whether or not each
      // snapshot finds room.
      if (spec.calls->layout.stack_bytes) lock_inc_counter(a, spec);
      break;
    case Work::Snapshot:
      emit_call_record(a, snapshot_spec(spec), false, frame_of(pushes), in, out);
      break;
    case Work::Count:
      if (spec.per_cpu) {
        emit_per_cpu_count(a, spec, in, out);
      } else {
        lock_inc_counter(a, spec);
      }
      break;
  }
  for (auto r = saved.rbegin(); r != saved.rend(); ++r) a.must(ZYDIS_MNEMONIC_POP, {reg(*r)});
  if (flags) restore_flags(a, spec.flag_save);
  if (any) a.must(ZYDIS_MNEMONIC_LEA, {reg(RSP), mem(RSP, kRedZone)});
  return frame_of(pushes);
}

// The two passes' labels: one restartable sequence per body that has one, and the end of a
// conditional tail call's record (where its not-taken side goes).
struct Labels {
  std::vector<Rseq> cs;
  RuntimeAddr not_taken;
  bool operator==(const Labels&) const = default;
};

// A body, and its labels' slot when it has a restartable sequence.
struct Builder {
  Assembler& a;
  const TrampolineSpec& spec;
  const Labels& in;
  Labels& out;
  std::vector<Work> bodies;
  std::vector<Frame> frames;

  void body(Work work) {
    std::size_t i = bodies.size();
    bodies.push_back(work);
    if (out.cs.size() <= i) {
      // Any address of this trampoline will do in the first pass: every branch reaches it.
      Sequence here{a.here(), a.here(), a.here(), a.here(), a.here()};
      RuntimeAddr at = a.here();
      out.cs.resize(i + 1, Rseq{here, here, here, at, at, at, at, at, at, at, at});
    }
    Rseq guess = i < in.cs.size() ? in.cs[i] : out.cs[i];
    frames.push_back(emit_body(a, spec, work, guess, out.cs[i]));
  }
  void cold() {
    for (std::size_t i = 0; i < bodies.size(); ++i) {
      Rseq guess = i < in.cs.size() ? in.cs[i] : out.cs[i];
      if (bodies[i] == Work::Count && spec.per_cpu) emit_per_cpu_cold(a, spec, guess, out.cs[i]);
      if (bodies[i] == Work::Entry || bodies[i] == Work::Exit)
        emit_call_record_cold(a, spec, bodies[i] == Work::Exit, frames[i], guess, out.cs[i]);
      if (bodies[i] == Work::Snapshot)
        emit_call_record_cold(a, snapshot_spec(spec), false, frames[i], guess, out.cs[i]);
    }
  }
};

Work entry_work(const TrampolineSpec& spec) {
  if (spec.calls) return Work::Entry;
  return spec.events ? Work::Event : Work::Count;
}

// The inverse of a jcc: its condition code with the low bit flipped.
ZydisMnemonic inverse(const Instruction& jcc) {
  static constexpr ZydisMnemonic kByCondition[16] = {
      ZYDIS_MNEMONIC_JO, ZYDIS_MNEMONIC_JNO, ZYDIS_MNEMONIC_JB,  ZYDIS_MNEMONIC_JNB,
      ZYDIS_MNEMONIC_JZ, ZYDIS_MNEMONIC_JNZ, ZYDIS_MNEMONIC_JBE, ZYDIS_MNEMONIC_JNBE,
      ZYDIS_MNEMONIC_JS, ZYDIS_MNEMONIC_JNS, ZYDIS_MNEMONIC_JP,  ZYDIS_MNEMONIC_JNP,
      ZYDIS_MNEMONIC_JL, ZYDIS_MNEMONIC_JNL, ZYDIS_MNEMONIC_JLE, ZYDIS_MNEMONIC_JNLE};
  return kByCondition[(jcc.condition & 0xf) ^ 1];
}

// The exit record, then the exit itself. A conditional tail call records only its taken side.
bool emit_exit(Builder& b, const Instruction& exit, std::string& why) {
  Assembler& a = b.a;
  if (exit.flow == Instruction::Flow::RelCondJump) {
    a.branch32(inverse(exit), b.in.not_taken);
    b.body(Work::Exit);
    a.jump(exit.target);
    b.out.not_taken = a.here();
    a.jump(exit.next());
    return true;
  }
  b.body(Work::Exit);
  auto copy = relocate_block({&exit, 1}, a.here(), why, false);
  if (!copy) return false;
  a.raw(copy->bytes);
  return true;
}

// Where each displaced instruction now runs (the first: `block`, the others: `copies`).
void note_copies(const JumpPlan& plan, std::size_t from, const RelocatedBlock& block,
                 Trampoline& t) {
  for (std::size_t i = 0; i < block.offsets.size(); ++i) {
    if (from + i == 0) {
      t.block = block.at + block.offsets[i];
      continue;
    }
    t.copies.emplace_back(plan.covered[from + i].address, block.at + block.offsets[i]);
  }
}

std::optional<Trampoline> generate(const JumpPlan& plan, const TrampolineSpec& spec,
                                   const Labels& in, Labels& out, std::string& why) {
  Assembler a(spec.address);
  Builder b{a, spec, in, out, {}, {}};
  Trampoline t{spec.address, {}, {}, {}, {}};
  std::span<const Instruction> covered = plan.covered;
  // The snapshot first: its thread's next entry record is its own (the reader pairs them so).
  const bool snapshot = spec.calls && spec.stacks;
  if (plan.role == PlanRole::Entry) {
    if (snapshot) b.body(Work::Snapshot);
    b.body(entry_work(spec));
    auto block = relocate_block(covered, a.here(), why);
    if (!block) return std::nullopt;
    a.raw(block->bytes);
    note_copies(plan, 0, *block, t);
    t.jump_back = block->at + static_cast<std::int64_t>(*block->jump_back);
  } else {
    if (!spec.calls) throw Error("an exit trampoline without call records");
    if (plan.role == PlanRole::Call) {
      if (snapshot) b.body(Work::Snapshot);
      b.body(Work::Entry);
    }
    auto prefix = relocate_block(covered.first(covered.size() - 1), a.here(), why, false);
    if (!prefix) return std::nullopt;
    a.raw(prefix->bytes);
    note_copies(plan, 0, *prefix, t);
    if (covered.size() > 1) t.copies.emplace_back(covered.back().address, a.here());
    if (!emit_exit(b, covered.back(), why)) return std::nullopt;
  }
  b.cold();
  t.code = a.bytes();
  return t;
}

}  // namespace

std::optional<RuntimeAddr> Trampoline::moved_pc(RuntimeAddr pc) const {
  for (const auto& [original, copy] : copies) {
    if (original == pc) return copy;
  }
  return std::nullopt;
}

std::optional<Trampoline> build_trampoline(const JumpPlan& plan, const TrampolineSpec& spec,
                                           std::string& why) {
  if (std::string bad = why_malformed(plan); !bad.empty()) {
    throw Error("internal error: the jump plan at " + plan.site.hex() +
                " cannot become a trampoline: " + bad);
  }
  if (spec.per_cpu && !near(spec.address, spec.per_cpu->counters)) {
    why = "per-CPU counters out of RIP-relative reach of the trampoline";
    return std::nullopt;
  }
  TrampolineSpec at_site = spec;
  if (at_site.calls) at_site.calls->site = plan.site;
  if (at_site.stacks) at_site.stacks->site = plan.site;
  if (at_site.stacks && (!at_site.calls || !at_site.stacks->layout.stack_bytes))
    throw Error("internal error: stack snapshots need call records and a snapshot buffer");
  Labels guess;
  guess.not_taken = spec.address;
  Labels found = guess;
  if (!generate(plan, at_site, guess, found, why)) return std::nullopt;
  Labels check = found;
  auto t = generate(plan, at_site, found, check, why);
  if (t && check != found) throw Error("trampoline layout changed between passes");
  return t;
}

}  // namespace probecost
