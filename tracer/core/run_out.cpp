// Bringing threads out of our jump areas before the detach unmaps them (OurMappings::release).
//
// A process that calls a probed function all the time has, at any moment, a thread or two
// inside a trampoline's own code (its counting, its call record): stopped there by the
// detach's PTRACE_INTERRUPT, it would go on through the trampoline, so the area could not go,
// and the call buffer (CPUs x ring, 32 MiB here) stayed with it (a busy fault_busy: 9 of 20
// detaches kept them, piling up until `probecost restore`). With the patches out, nothing
// leads into an area again once a thread has left it: so each thread caught in one is
// single-stepped, alone (every other thread stays stopped), until its RIP is outside, or at a
// copy's first byte or jump back, which leave_copies' rule moves to the original code
// (tracer/core/copy_exits.hpp) without running the copy. A trampoline's path is a few tens of
// instructions; kMaxSteps bounds it (and a futex wait for room in a full ring is bounded by
// the ring's wait bound, and ends as soon as the drain, still running during the detach,
// frees room). What runs is our code only, on the thread's own registers: what it would run
// anyway once let go, with the same result.
//
// Nothing else can lead into an area: the patches are out, no relocated instruction is a
// call, and `record` never rewrites a return address (its exits are patched in place:
// breakpoint/jump/exit_plan.hpp), so no frame returns into a trampoline. A signal frame can (a
// handler interrupted a thread in a trampoline and has not returned): that thread is not
// stepped (its handler may run for ever), and its area stays, as before, to be taken out by a
// later attach (reclaim_left_areas) or `probecost restore` once no thread can be in it.
//
// Kernel quirks that matter here:
// - rseq: a thread stopped inside a restartable sequence is sent to its abort handler by the
//   kernel when it next returns to user space (the stop scheduled it out). Single-stepped
//   through a sequence, every step's stop does the same: it would never reach the commit. So
//   after the first step (which lets the kernel abort a sequence the thread was stopped in,
//   whose reads may be stale), each step starts with the thread's rseq_cs cleared when it
//   points into our areas. That is safe because nothing else runs: every other thread of the
//   process is stopped (and aborts its own sequence when it runs again), so the stepped
//   thread's read-modify-commit of a CPU's counter or ring has no other writer, whichever CPU
//   it is on. The kernel clears rseq_cs itself whenever the thread is outside a sequence.
// - A single-step's trap is forced on the thread: with SIGTRAP blocked, force_sig resets the
//   program's SIGTRAP disposition to SIG_DFL for the whole process. SIGTRAP is unblocked
//   (PTRACE_SETSIGMASK) meanwhile, as for injected code (inject.cpp).
// - pushf under single-step pushes TF=1, which a popf after we let go would set again (a
//   SIGTRAP in an untraced program). Only the measurement-only FlagSave::Pushfq trampolines
//   have one: such a thread is not stepped.
// - The single-step flag outlives a dying tracer (Task::stepping): the thread is parked in an
//   interrupt stop afterwards (park_after_steps). A SIGKILL of probecost in the middle of the
//   steps (a few hundred microseconds per caught thread) lets the thread go with TF set, as
//   during an injected system call.
#include <signal.h>
#include <sys/ptrace.h>

#include <algorithm>

#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

// A trampoline's longest path (a call record with its wait for room and its drop) is under
// 100 instructions; signal stops count too.
constexpr int kMaxSteps = 2000;
constexpr std::uint8_t kPushf = 0x9c;

bool in_any(const std::vector<OurMapping>& areas, RuntimeAddr at) {
  return std::any_of(areas.begin(), areas.end(), [at](const OurMapping& m) {
    return m.start <= at && at < m.start + static_cast<std::int64_t>(m.size);
  });
}

// Where the thread's struct rseq keeps rseq_cs, if it has a registration.
std::optional<RuntimeAddr> rseq_cs_field(pid_t tid) {
  __ptrace_rseq_configuration conf{};
  if (sys::ptrace_call(PTRACE_GET_RSEQ_CONFIGURATION, tid, reinterpret_cast<void*>(sizeof conf),
                       &conf) < 0 ||
      !conf.rseq_abi_pointer || conf.rseq_abi_size < 16)
    return std::nullopt;
  return RuntimeAddr(conf.rseq_abi_pointer + 8);
}

// rseq_cs = 0 if it points at a descriptor in our areas (see the top).
void clear_our_rseq_cs(TraceeMemory& memory, RuntimeAddr field,
                       const std::vector<OurMapping>& areas) {
  std::uint64_t cs = 0;
  memory.read(field, {reinterpret_cast<std::uint8_t*>(&cs), sizeof cs});
  if (!cs || !in_any(areas, RuntimeAddr(cs))) return;
  const std::uint64_t zero = 0;
  memory.write(field, {reinterpret_cast<const std::uint8_t*>(&zero), sizeof zero});
}

// SIGTRAP unblocked in the thread `ref` names for the guard's lifetime (see the top); found
// again by its ref at the end, as the thread may be gone by then.
class TrapUnblocked {
 public:
  TrapUnblocked(TracedProcess& proc, TaskRef ref) : proc_(proc), ref_(ref) {
    Task* t = proc_.task(ref_);
    constexpr std::uint64_t bit = 1ull << (SIGTRAP - 1);
    if (t) saved_ = t->blocked_signals();
    if (saved_ && (*saved_ & bit) && t->set_blocked_signals(*saved_ & ~bit)) return;
    saved_.reset();
  }
  ~TrapUnblocked() {
    try {
      if (Task* t = proc_.task(ref_); t && saved_) t->set_blocked_signals(*saved_);
    } catch (const Error&) {
      // Going away with its process.
    }
  }
  TrapUnblocked(const TrapUnblocked&) = delete;
  TrapUnblocked& operator=(const TrapUnblocked&) = delete;

 private:
  TracedProcess& proc_;
  TaskRef ref_;
  std::optional<std::uint64_t> saved_;
};

}  // namespace

void TracedProcess::run_out_of_our_areas() {
  std::vector<OurMapping> areas;
  for (const OurMapping& m : our_mappings_.list()) {
    if (m.kind == OurMapping::Kind::JumpArea) areas.push_back(m);
  }
  if (areas.empty()) return;
  std::vector<TaskRef> caught;
  for (auto& [tid, t] : tasks_) {
    if (!t.stopped() || !t.runs_with_us()) continue;
    if (auto rip = t.rip(); rip && in_any(areas, *rip)) caught.push_back(t.ref());
  }
  for (const TaskRef& ref : caught) {
    std::string why;
    try {
      why = step_out_of(ref, areas);
    } catch (const Error& e) {
      why = e.what();
    }
    if (!why.empty()) our_mappings_.note_stuck(ref.tid, why);
  }
}

std::string TracedProcess::step_out_of(TaskRef ref, const std::vector<OurMapping>& areas) {
  Task* t = task(ref);
  if (!t) return {};
  // A group-stop stays the program's (the detach puts the thread back into it), and an event
  // still to report is the event loop's: neither thread is moved.
  if (t->last_stop().group_stop()) return "it is in a group-stop";
  if (t->deferred && !t->deferred->signal_stop()) return "it has an event to report first";
  if (t->deferred) {
    // A signal that came in the trampoline: the steps resume without it, the detach gives it.
    t->pending_signals.push_front(t->deferred->stop_signal());
    t->deferred.reset();
  }
  auto field = rseq_cs_field(ref.tid);
  TrapUnblocked unblocked(*this, ref);
  std::string why;
  for (int step = 0;; ++step) {
    if (!(t = task(ref))) return {};
    auto rip = t->rip();
    if (!rip || !in_any(areas, *rip)) break;
    if (auto to = relocated_.in_original(*rip)) {
      t->set_rip(*to);
      break;
    }
    if (step == kMaxSteps) {
      why = "it did not leave within " + std::to_string(kMaxSteps) + " instructions";
      break;
    }
    if (memory_.read_byte(*rip) == kPushf) {
      why = "its trampoline saves the flags with pushf, which a single-step would leave TF in";
      break;
    }
    if (step > 0 && field) clear_our_rseq_cs(memory_, *field, areas);
    if (!t->single_step()) return {};
    auto ws = wait_for(*t);
    if (!ws || !(t = task(ref))) return {};
    // Every SIGTRAP here is the step's: TRAP_TRACE, or TRAP_BRKPT after a system call.
    if (ws->signal_stop() && ws->stop_signal() != SIGTRAP) {
      t->pending_signals.push_back(ws->stop_signal());
    } else if (!ws->signal_stop()) {
      events_.defer(*t, *ws);  // an exit, say: the event loop's
      return "it reported an event while it was brought out";
    }
  }
  park_after_steps(ref);
  return why;
}

}  // namespace probecost
