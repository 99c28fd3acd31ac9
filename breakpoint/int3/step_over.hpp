#pragma once
// How a thread stopped on one of our int3 bytes gets past the instruction that byte displaced.
//
// When an int3 traps, the kernel reports SIGTRAP with RIP already one past the 0xCC. A strategy
// leaves the thread stopped, with its registers set so that a plain resume continues correctly
// after the displaced instruction.
#include <sys/user.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "breakpoint/int3/outline.hpp"
#include "breakpoint/int3/site.hpp"
#include "breakpoint/int3/step_over_choice.hpp"
#include "breakpoint/x86/decoder.hpp"

namespace probecost {

// What a strategy may do with the stopped thread. The tracer implements it.
class StoppedThread {
 public:
  virtual ~StoppedThread() = default;
  // RIP alone (PTRACE_PEEKUSER, about half the cost of PTRACE_GETREGS here), cached.
  virtual RuntimeAddr pc() = 0;
  virtual const user_regs_struct& regs() = 0;  // read once per stop, then cached
  virtual void set_pc(RuntimeAddr pc) = 0;     // writes RIP only
  virtual void set_regs(const user_regs_struct& regs) = 0;
  // PTRACE_SINGLESTEP and wait until this thread reports the step's trap. A signal that arrives
  // meanwhile is kept for delivery at the next resume. False when the instruction faulted (a
  // SIGSEGV, SIGBUS, SIGFPE or SIGILL came instead of the trap): it did not complete, and the
  // fault's signal is kept for the thread.
  virtual bool single_step() = 0;
  // Runs the thread until it executes the int3 the caller has written at `at`, and puts RIP
  // back on `at`. Signals are kept as for single_step(); false when it faulted first.
  virtual bool run_to_trap(RuntimeAddr at) = 0;
  // Puts RIP back on `site` and has the tracer collect the thread's int3 stop, after which the
  // kernel keeps no SIGTRAP for it: should the tracer die from then on, the thread is let go
  // on the site and takes the int3 again. Called before a register change that a SIGTRAP still
  // pending would be misread with by the trap area's handler
  // (breakpoint/in_tracee/trap_handler.hpp).
  virtual void take_trap(RuntimeAddr site) { (void)site; }
};

class StepOver {
 public:
  virtual ~StepOver() = default;
  virtual std::string name() const = 0;
  // Called once per site, after it is enabled (the outline strategy maps its scratch page then
  // if a thread can be made to, or else at the first hit).
  virtual void prepare(BreakpointSite&) {}
  // Called on a hit before step(), with the hitting thread stopped: finishes what prepare()
  // had to leave for later.
  virtual void ready(BreakpointSite&) {}
  // True when the site's int3 is absent while stepping, so other threads could run through the
  // site unseen: the tracer must stop them around step().
  virtual bool needs_all_stop(const BreakpointSite& site) const = 0;
  // True when a SIGTRAP with RIP one past this site can only be its int3, so the hit path may
  // skip PTRACE_GETSIGINFO. Holds when the int3 never leaves and the displaced instruction is
  // longer than one byte: no thread can otherwise be at site+1, inside that instruction.
  virtual bool trap_is_unambiguous(const BreakpointSite&) const { return false; }
  // True when no site needs more of the registers than RIP: the hit path then reads RIP alone.
  virtual bool pc_suffices() const = 0;
  virtual void step(StoppedThread& thread, BreakpointSite& site) = 0;
  // How this site is stepped over, and why (for verbose output).
  virtual std::string describe(const BreakpointSite&) const { return name(); }
  virtual StepMethod method(const BreakpointSite&) const = 0;
  // The copy of the site's instruction a hit resumes in, once placed (outline), if any.
  virtual std::optional<RuntimeAddr> copy_of(const BreakpointSite&) const { return std::nullopt; }
};

// What a single-step of an instruction leaves to put right (see SingleStepOver).
struct StepFixup {
  std::optional<RuntimeAddr> rep_next;  // a rep string instruction: where the next one starts
  bool pushes_flags = false;            // pushf: the trap flag it pushed is the step's
  static StepFixup of(const std::optional<Instruction>& insn);
};

// The classic debugger way: put the original byte back, rewind RIP onto it, single-step one
// instruction, write int3 again. Two stops per hit.
//
// A rep-prefixed string instruction (rep movsb, rep stosb) traps after every iteration when
// single-stepped, with RIP still on it: it is stepped until RIP leaves it, so that one call
// is one hit, not one per byte. A single-stepped pushf pushes RFLAGS with the trap flag the
// step set: popped later, it would trap in the program, so it is cleared in the pushed word
// (as GDB's amd64_displaced_step_fixup does), unless the program had set it itself.
class SingleStepOver final : public StepOver {
 public:
  explicit SingleStepOver(TraceeMemory* memory = nullptr) : memory_(memory) {}
  std::string name() const override { return step_over_name(StepOverChoice::SingleStep); }
  StepMethod method(const BreakpointSite&) const override { return StepMethod::SingleStep; }
  void prepare(BreakpointSite& site) override;
  bool needs_all_stop(const BreakpointSite&) const override { return true; }
  bool pc_suffices() const override { return true; }
  void step(StoppedThread& thread, BreakpointSite& site) override;
  // The step itself, for other strategies' fallback (`memory` may be null when `fixup` is
  // empty).
  static void step_over(StoppedThread& thread, BreakpointSite& site, TraceeMemory* memory,
                        const StepFixup& fixup);

 private:
  TraceeMemory* memory_;
  std::unordered_map<std::uint64_t, StepFixup> fixups_;
};

// One stop per hit: the displaced instruction is emulated on the registers, or executed from a
// relocated copy; whichever `mode` allows, chosen per site. A site whose instruction allows
// neither falls back to the classic single-step, and describe() says why.
//
// `auto` prefers the copy. Unlike the kernel's uprobes, which emulate push and friends because
// registers cost them nothing, a tracer pays a system call for every register access: here
// PTRACE_GETREGS + PTRACE_SETREGS cost ~3 us, while resuming in the copy is one POKEUSER of
// RIP (~0.7 us). So auto emulates only what changes RIP alone (nop, endbr64, jmp) and what
// cannot run elsewhere (call), and copies everything else out of line.
class FastStepOver final : public StepOver {
 public:
  // Emulate, Outline or Auto (SingleStep is SingleStepOver's).
  using Mode = StepOverChoice;
  using Method = StepMethod;

  FastStepOver(Mode mode, TraceeMemory& memory, ScratchMapper mapper, CopyMap* copies = nullptr)
      : mode_(mode), memory_(&memory), outliner_(memory, std::move(mapper), copies) {}
  std::string name() const override;
  void prepare(BreakpointSite& site) override;
  void ready(BreakpointSite& site) override;
  bool needs_all_stop(const BreakpointSite& site) const override;
  bool trap_is_unambiguous(const BreakpointSite& site) const override;
  bool pc_suffices() const override { return sites_needing_registers_ == 0; }
  void step(StoppedThread& thread, BreakpointSite& site) override;
  std::string describe(const BreakpointSite& site) const override;
  std::optional<RuntimeAddr> copy_of(const BreakpointSite& site) const override;
  Method method(const BreakpointSite& site) const override {
    return plans_.at(site.address().value()).method;
  }

 private:
  struct Plan {
    Method method = Method::SingleStep;
    Instruction insn;
    RuntimeAddr copy;
    bool placed = false;  // Outline: the copy is written (else it is, at the first hit)
    std::string why_emulate, why_outline;
    std::string why_not_faster;
    bool needs_registers() const;
  };
  // Picks the method for the plan's instruction, placing the copy if it can.
  void choose(Plan& plan);
  Mode mode_;
  TraceeMemory* memory_;
  Outliner outliner_;
  std::unordered_map<std::uint64_t, Plan> plans_;
  int sites_needing_registers_ = 0;
};

// `copies`, when given, learns where the out-of-line copies run.
std::unique_ptr<StepOver> make_step_over(StepOverChoice choice, TraceeMemory& memory,
                                         ScratchMapper mapper, CopyMap* copies = nullptr);

}  // namespace probecost
