#include "breakpoint/step_over.hpp"

#include "breakpoint/emulate.hpp"
#include "breakpoint/error.hpp"

namespace probecost {

void SingleStepOver::step(StoppedThread& thread, BreakpointSite& site) {
  site.disable();
  thread.set_pc(site.address());
  thread.single_step();
  site.enable();
}

std::string FastStepOver::name() const {
  switch (mode_) {
    case Mode::Emulate:
      return "emulate";
    case Mode::Outline:
      return "outline";
    case Mode::Auto:
      return "auto";
  }
  return "?";
}

namespace {

// Emulation that only moves RIP: no register read beyond RIP, no register write beyond it.
bool rip_only(const Instruction& in) {
  return in.kind == Instruction::Kind::Nop || in.kind == Instruction::Kind::JmpRel;
}

}  // namespace

void FastStepOver::prepare(BreakpointSite& site) {
  Plan plan;
  std::array<std::uint8_t, 15> bytes{};
  memory_->read(site.address(), bytes);
  bytes[0] = site.saved_byte();  // memory holds our int3 there now
  auto insn = decode(bytes, site.address());
  if (!insn) {
    plan.why_not_faster = "the bytes at " + site.address().hex() + " do not decode";
    plans_[site.address().value()] = plan;
    return;
  }
  plan.insn = *insn;
  std::string why_emulate = why_not_emulable(*insn), why_outline;
  auto try_emulate = [&] {
    if (plan.method == Method::SingleStep && mode_ != Mode::Outline && why_emulate.empty())
      plan.method = Method::Emulate;
  };
  auto try_outline = [&] {
    if (plan.method != Method::SingleStep || mode_ == Mode::Emulate) return;
    if (auto copy = outliner_.place(*insn, why_outline)) {
      plan.method = Method::Outline;
      plan.copy = *copy;
    }
  };
  if (mode_ == Mode::Auto && rip_only(*insn)) try_emulate();
  try_outline();
  try_emulate();
  if (plan.method == Method::SingleStep) {
    plan.why_not_faster = why_emulate;
    if (!why_outline.empty())
      plan.why_not_faster += (why_emulate.empty() ? "" : "; ") + why_outline;
  }
  if (plan.method != Method::Outline && !(plan.method == Method::Emulate && rip_only(*insn)) &&
      plan.method != Method::SingleStep) {
    ++sites_needing_registers_;
  }
  plans_[site.address().value()] = plan;
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
        thread.set_pc(RuntimeAddr(pc_only.rip));
        return;
      }
      user_regs_struct regs = thread.regs();
      if (emulate(p.insn, regs, *memory_)) {
        thread.set_pc(RuntimeAddr(regs.rip));
      } else {
        thread.set_regs(regs);
      }
      return;
    }
    case Method::SingleStep:
      classic_.step(thread, site);
      return;
  }
}

std::string FastStepOver::describe(const BreakpointSite& site) const {
  const Plan& p = plans_.at(site.address().value());
  std::string insn = "'" + p.insn.text + "' (" + std::to_string(p.insn.length) + " bytes)";
  switch (p.method) {
    case Method::Emulate:
      return "emulate " + insn;
    case Method::Outline:
      return "outline " + insn + " from " + p.copy.hex();
    case Method::SingleStep:
      return "singlestep " + insn + ": " + p.why_not_faster;
  }
  return "?";
}

void check_step_over_name(const std::string& name) {
  if (name != "singlestep" && name != "emulate" && name != "outline" && name != "auto") {
    throw UsageError("unknown step-over strategy '" + name +
                     "' (singlestep, emulate, outline or auto)");
  }
}

std::unique_ptr<StepOver> make_step_over(const std::string& name, TraceeMemory& memory,
                                         ScratchMapper mapper) {
  check_step_over_name(name);
  if (name == "singlestep") return std::make_unique<SingleStepOver>();
  if (name == "emulate") {
    return std::make_unique<FastStepOver>(FastStepOver::Mode::Emulate, memory, std::move(mapper));
  }
  if (name == "outline") {
    return std::make_unique<FastStepOver>(FastStepOver::Mode::Outline, memory, std::move(mapper));
  }
  return std::make_unique<FastStepOver>(FastStepOver::Mode::Auto, memory, std::move(mapper));
}

}  // namespace probecost
