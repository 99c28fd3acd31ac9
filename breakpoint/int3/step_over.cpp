#include "breakpoint/int3/step_over.hpp"

#include <Zydis/Zydis.h>

#include "breakpoint/x86/emulate.hpp"
#include "common/error.hpp"

namespace probecost {

namespace {

// Emulation that only moves RIP: no register read beyond RIP, no register write beyond it.
bool rip_only(const Instruction& in) {
  return in.kind == Instruction::Kind::Nop || in.kind == Instruction::Kind::JmpRel;
}

// Whether a thread moved to `to` past the emulated `in`, its int3's SIGTRAP still pending (the
// tracer died before resuming it), is left alone by the trap area's handler: its record names
// the instruction's next address and branch target as places a spent trap is found
// (trap::moved_addresses), but one byte past the site is a new hit, whose copy would do the
// instruction a second time. A nop done twice is still nothing done.
bool pending_trap_reads_right(const Instruction& in, RuntimeAddr to) {
  if (in.kind == Instruction::Kind::Nop) return true;
  if (to == in.address + 1) return false;
  return to == in.next() || (in.relative_branch && to == in.target);
}

std::optional<Instruction> decode_site(TraceeMemory& memory, const BreakpointSite& site) {
  std::array<std::uint8_t, 15> bytes{};
  memory.read(site.address(), bytes);
  bytes[0] = site.saved_byte();  // memory holds our int3 there now
  return decode(bytes, site.address());
}

// Puts the site's int3 back however the step ends (a thread that vanished mid-step too).
class Reinsert {
 public:
  explicit Reinsert(BreakpointSite& site) : site_(site) { site_.disable(); }
  ~Reinsert() {
    try {
      site_.enable();
    } catch (const Error&) {
      // The address space is gone (the process exited or exec'd meanwhile).
    }
  }

 private:
  BreakpointSite& site_;
};

bool is_pushf(const Instruction& in) {
  return in.mnemonic == ZYDIS_MNEMONIC_PUSHFQ || in.mnemonic == ZYDIS_MNEMONIC_PUSHF ||
         in.mnemonic == ZYDIS_MNEMONIC_PUSHFD;
}

// The trap flag (RFLAGS bit 8) that PTRACE_SINGLESTEP set, in the word a stepped pushf wrote.
void clear_pushed_trap_flag(StoppedThread& thread, TraceeMemory& memory) {
  RuntimeAddr flags_byte1(thread.regs().rsp + 1);
  memory.write_byte(flags_byte1, memory.read_byte(flags_byte1) & ~1u);
}

// A rep-prefixed string instruction traps after every iteration when single-stepped, with RIP
// still on it. Rather than thousands of steps, a temporary int3 on the next instruction lets it
// run to the end at full speed (every other thread is stopped meanwhile). Where that byte is an
// int3 already (another probe), it is stepped iteration by iteration instead.
void finish_repeats(StoppedThread& thread, RuntimeAddr site, TraceeMemory& memory,
                    RuntimeAddr next) {
  if (thread.pc() != site) return;
  std::uint8_t saved = memory.read_byte(next);
  if (saved == kInt3) {
    while (thread.pc() == site && thread.single_step()) {
    }
    return;
  }
  memory.write_byte(next, kInt3);
  try {
    thread.run_to_trap(next);
  } catch (...) {
    memory.write_byte(next, saved);
    throw;
  }
  memory.write_byte(next, saved);
}

}  // namespace

StepFixup StepFixup::of(const std::optional<Instruction>& insn) {
  StepFixup f;
  if (insn && insn->rep) f.rep_next = insn->next();
  f.pushes_flags = insn && is_pushf(*insn);
  return f;
}

void SingleStepOver::prepare(BreakpointSite& site) {
  if (memory_) fixups_[site.address().value()] = StepFixup::of(decode_site(*memory_, site));
}

void SingleStepOver::step(StoppedThread& thread, BreakpointSite& site) {
  auto it = fixups_.find(site.address().value());
  step_over(thread, site, memory_, it != fixups_.end() ? it->second : StepFixup{});
}

void SingleStepOver::step_over(StoppedThread& thread, BreakpointSite& site, TraceeMemory* memory,
                               const StepFixup& fixup) {
  Reinsert reinsert(site);
  thread.set_pc(site.address());
  constexpr unsigned long long kTrapFlag = 0x100;
  bool own_trap_flag = fixup.pushes_flags && (thread.regs().eflags & kTrapFlag);
  if (!thread.single_step() || !memory) return;
  if (fixup.pushes_flags && !own_trap_flag) clear_pushed_trap_flag(thread, *memory);
  if (fixup.rep_next) finish_repeats(thread, site.address(), *memory, *fixup.rep_next);
}

std::string FastStepOver::name() const {
  return step_over_name(mode_);
}

bool FastStepOver::Plan::needs_registers() const {
  return method == Method::Emulate && !rip_only(insn);
}

void FastStepOver::prepare(BreakpointSite& site) {
  Plan plan;
  auto insn = decode_site(*memory_, site);
  if (!insn) {
    plan.why_not_faster = "the bytes at " + site.address().hex() + " do not decode";
    plans_[site.address().value()] = plan;
    return;
  }
  plan.insn = *insn;
  plan.why_emulate = why_not_emulable(*insn);
  choose(plan);
  if (plan.needs_registers()) ++sites_needing_registers_;
  plans_[site.address().value()] = plan;
}

void FastStepOver::choose(Plan& p) {
  bool can_emulate = p.why_emulate.empty() && mode_ != Mode::Outline;
  p.method = Method::SingleStep;
  if (mode_ == Mode::Auto && can_emulate && rip_only(p.insn)) {
    p.method = Method::Emulate;
    return;
  }
  if (mode_ != Mode::Emulate && p.why_outline.empty()) {
    bool later = false;
    auto copy = outliner_.place(p.insn, p.why_outline, later);
    if (copy || later) {
      p.method = Method::Outline;
      p.placed = copy.has_value();
      if (copy) p.copy = *copy;
      return;
    }
  }
  if (can_emulate) {
    p.method = Method::Emulate;
    return;
  }
  p.why_not_faster = p.why_emulate;
  if (!p.why_outline.empty())
    p.why_not_faster += (p.why_emulate.empty() ? "" : "; ") + p.why_outline;
}

void FastStepOver::ready(BreakpointSite& site) {
  Plan& p = plans_.at(site.address().value());
  if (p.method != Method::Outline || p.placed) return;
  choose(p);
  if (p.method == Method::Outline && !p.placed) {
    p.why_outline = "no scratch page could be mapped";
    choose(p);
  }
  if (p.needs_registers()) ++sites_needing_registers_;
}

bool FastStepOver::needs_all_stop(const BreakpointSite& site) const {
  return method(site) == Method::SingleStep;
}

bool FastStepOver::trap_is_unambiguous(const BreakpointSite& site) const {
  const Plan& p = plans_.at(site.address().value());
  return p.method != Method::SingleStep && p.insn.length > 1;
}

void FastStepOver::step(StoppedThread& thread, BreakpointSite& site) {
  const Plan& p = plans_.at(site.address().value());
  switch (p.method) {
    case Method::Outline:
      thread.set_pc(p.copy);
      return;
    case Method::Emulate: {
      if (rip_only(p.insn)) {  // nop, jmp: no register but RIP is read or written
        user_regs_struct pc_only{};
        pc_only.rip = thread.pc().value();
        emulate(p.insn, pc_only, *memory_);
        if (!pending_trap_reads_right(p.insn, RuntimeAddr(pc_only.rip)))
          thread.take_trap(site.address());
        thread.set_pc(RuntimeAddr(pc_only.rip));
        return;
      }
      user_regs_struct regs = thread.regs();
      bool rip_alone = emulate(p.insn, regs, *memory_);
      if (!pending_trap_reads_right(p.insn, RuntimeAddr(regs.rip))) {
        thread.take_trap(site.address());
        rip_alone = false;
      }
      if (rip_alone) {
        thread.set_pc(RuntimeAddr(regs.rip));
      } else {
        thread.set_regs(regs);
      }
      return;
    }
    case Method::SingleStep:
      SingleStepOver::step_over(thread, site, memory_, StepFixup::of(p.insn));
      return;
  }
}

std::string FastStepOver::describe(const BreakpointSite& site) const {
  const Plan& p = plans_.at(site.address().value());
  std::string how = std::string(kStepMethodNames.name(p.method)) + " " + p.insn.quoted() + " (" +
                    std::to_string(p.insn.length) + " bytes)";
  switch (p.method) {
    case Method::Emulate:
      // Where a copy was tried first (auto), why there is none.
      return how + (p.why_outline.empty() ? "" : ": no copy, " + p.why_outline);
    case Method::Outline:
      return how + (p.placed ? " from " + p.copy.hex() : " (copy placed at the first hit)");
    case Method::SingleStep:
      return how + ": " + p.why_not_faster;
  }
  return how;
}

std::unique_ptr<StepOver> make_step_over(StepOverChoice choice, TraceeMemory& memory,
                                         ScratchMapper mapper, CopyMap* copies) {
  if (choice == StepOverChoice::SingleStep) return std::make_unique<SingleStepOver>(&memory);
  return std::make_unique<FastStepOver>(choice, memory, std::move(mapper), copies);
}

std::optional<RuntimeAddr> FastStepOver::copy_of(const BreakpointSite& site) const {
  auto it = plans_.find(site.address().value());
  if (it == plans_.end() || it->second.method != Method::Outline || !it->second.placed)
    return std::nullopt;
  return it->second.copy;
}

}  // namespace probecost
