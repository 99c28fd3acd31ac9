#pragma once
// TracedProcess: the one owner of a process under ptrace, made only by launch() or attach().
// Every way out (detach(), kill(), the destructor, an exception unwinding through the owner)
// removes our int3 bytes and rewinds a thread stopped on one before letting go.
//
// As rr's Task, AddressSpace and AutoRemoteSyscalls, it is made of three parts it owns: its
// tasks (ThreadSet, threads()), its memory and what we put in it (AddressSpace, space()), and
// the calls run in it (RemoteCalls, calls()). It keeps what needs them together: waiting,
// stopping and resuming, new tasks and execs, the trap area, semaphores, attach and detach.
//
// Every thread is attached with PTRACE_SEIZE (the launched child too, as strace does): unlike
// PTRACE_ATTACH/TRACEME, it lets us stop a thread with PTRACE_INTERRUPT instead of a SIGSTOP we
// must later swallow, and it tells a group-stop (a shell's SIGSTOP) from a signal, so the
// process can stay stopped under PTRACE_LISTEN as it would untraced.
//
// A process never waits by itself: every wait goes through its EventSource (the Family, the one
// owner of waits: family.hpp); events of other tasks that come meanwhile wait on their Task.
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/phases.hpp"
#include "tracer/core/address_space.hpp"
#include "tracer/core/events.hpp"
#include "tracer/core/remote_calls.hpp"
#include "tracer/core/semaphores.hpp"
#include "tracer/core/spawn.hpp"
#include "tracer/core/task.hpp"
#include "tracer/core/thread_set.hpp"
#include "tracer/core/way_back.hpp"
#include "tracer/os/memory.hpp"
#include "tracer/os/remote_process.hpp"
#include "tracer/os/wait_status.hpp"

namespace probecost {

// The ptrace options every task is traced with (process_start.cpp says why each).
inline constexpr long kTraceOptions = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK |
                                      PTRACE_O_TRACEVFORK | PTRACE_O_TRACEVFORKDONE |
                                      PTRACE_O_TRACEEXEC | PTRACE_O_TRACESYSGOOD;

class Guardian;
class Int3Area;

// Done, or Gone when the thread (or process) went away under it (a SIGKILL, another thread's
// exit_group()): an expected outcome, not an error; its end is reported next.
enum class Outcome { Done, Gone };

// A new task as its parent's fork/vfork/clone event tells it (TracedProcess::new_task_of).
struct NewTask {
  pid_t tid;
  Task::Role role;
  bool vfork;  // its parent waits in vfork() until it execs or exits
};

class TracedProcess final : public RemoteProcess {
 public:
  // Starts the command, seized, stopped at its exec (before the dynamic loader has run).
  static std::unique_ptr<TracedProcess> launch(const LaunchSpec& spec, EventSource& events);
  // Seizes every thread of a running process and stops them all. CannotTrace (none, a kernel
  // thread, a zombie: cannot_trace.hpp; launch's for no program), or Error when the kernel
  // refuses (no permission, traced already). `with_guardian`: its guardian (start_guardian) is
  // started between the seize and the stop, while the process still runs.
  static std::unique_ptr<TracedProcess> attach(pid_t pid, EventSource& events,
                                               bool with_guardian = false);
  // A process the family follows (a fork child, or a process sharing a member's memory that
  // exec'd): traced already, with no task yet. Made by Family, which then calls
  // take_over_fork() or take_exec_of_sharer().
  static std::unique_ptr<TracedProcess> follower(pid_t pid, EventSource& events);
  ~TracedProcess() override;
  TracedProcess(const TracedProcess&) = delete;
  TracedProcess& operator=(const TracedProcess&) = delete;

  pid_t pid() const override { return pid_; }
  // A thread whose /proc entry shows the process's memory: the leader, or while the leader is
  // a zombie (it called pthread_exit), a live thread (/proc/TID/maps of any thread works).
  pid_t proc_tid() override { return threads_.proc_tid(); }
  bool launched() const { return launched_; }
  // Its tasks (thread_set.hpp) and its memory with what we put in it (address_space.hpp).
  ThreadSet& threads() { return threads_; }
  AddressSpace& space() { return space_; }
  ProcMemory& memory() override { return space_.memory(); }
  Task* task(pid_t tid) { return threads_.find(tid); }
  Task* task(const TaskRef& ref) { return threads_.find(ref); }
  bool alive() const { return !end_.has_value() && !detached_ && !exec_ended_; }
  bool detached() const { return detached_; }
  bool exec_ended() const { return exec_ended_; }
  // How the process ended (its thread-group leader's final status), once it has.
  const std::optional<WaitStatus>& end() const { return end_; }
  // The CPU time the whole process has used so far (user + system), in seconds: from
  // its CPU clock while it lives (0 once it is reaped); for a launched process that ended, the
  // growth of our RUSAGE_CHILDREN (exact, and what is left once the process is reaped).
  double cpu_seconds() const;

  // True when the process is going away under us: none of its threads answers ptrace any more
  // (exit_group() or a SIGKILL in progress; its memory may be gone already, so writes to it
  // fail with EIO). A failure to restore a byte then harms nobody.
  bool dying();
  // Runs `op` on the process: a failure that comes from the thread or the process going away
  // under it (TaskGone, or an Error while dying()) is Outcome::Gone; any other is thrown.
  template <typename Op>
  Outcome unless_gone(Op&& op) {
    try {
      op();
    } catch (const TaskGone&) {
      return Outcome::Gone;
    } catch (const Error&) {
      if (!dying()) throw;
      return Outcome::Gone;
    }
    return Outcome::Done;
  }

  // Runs the stopped process until its executable's entry point (AT_ENTRY), so that the
  // libraries it needs at start-up are mapped; all threads are stopped again afterwards.
  void run_to_entry();
  // After an exec (exec_ended()): the old image's sites, jumps and scratch pages
  // are dropped, and the new image is run to its entry point, ready to be probed.
  void resume_after_exec();

  // The bookkeeping every reported status of one of our tasks goes through, done by the event
  // owner as the status arrives: a gone thread is dropped (the leader last: the process has
  // ended), an unknown task is added, a thread's exec is settled. Returns the task, or nullptr
  // when the event needs nothing more (a thread gone, a task we do not know). A task that is
  // not a thread of ours and exec'd is left to the event owner (release_sharer or
  // hand_over_sharer).
  Task* update_from(const TaskEvent& ev);
  // A stop of `task` seen now and handled later (EventSource::defer): when it is the trap of
  // one of our int3 bytes, the thread is put back on the site and the status it should be
  // handled as returned (a plain interrupt stop: resumed, the int3 traps again and the hit is
  // counted then). The stop is collected at the next wait (Family), after which the kernel
  // keeps no signal for it: were probecost to die then, a thread one byte past the int3 would
  // be let go inside the displaced instruction (issue 16: SIGILL at probe_fn+3). On the site,
  // it takes the int3 again, or runs the original instruction once the byte is back.
  WaitStatus park_trap(Task& task, WaitStatus ws);
  // Waits until `task` reports, deferring other tasks' events. Nothing when it is gone. Once
  // past `deadline` (now_s(); 0: none), `task` is sent a PTRACE_INTERRUPT (once).
  std::optional<WaitStatus> wait_for(Task& task, double deadline = 0);
  // Collects `task`'s held stop now (EventSource::take_stop).
  void take_stop(Task& task) { events_.take_stop(task); }

  // Brings every running task but `except` into a ptrace-stop with PTRACE_INTERRUPT. An event
  // that arrives instead of the interrupt's stop is deferred on its task. A task inside vfork()
  // or already exiting cannot stop and is not waited for. A second stop request (SIGINT twice)
  // abandons the wait. Returns the tasks it stopped (those that reported the interrupt).
  std::vector<pid_t> stop_all(pid_t except = 0, bool include_listening = false);
  // Resumes those of `tids` that are still stopped with nothing deferred.
  void resume_stopped(const std::vector<pid_t>& tids);

  // A fork/vfork/clone event of `parent`, settled by the event owner (EventSource::on_new_task):
  // the child becomes one of our tasks, or, while following forks, a process of its own. When
  // the child's first stop came earlier and it is now ready to run, returns its tid: the caller
  // resumes it (or not, when it is letting go of everything).
  pid_t on_new_task(Task& parent) { return events_.on_new_task(*this, parent); }
  // What the child of `parent`'s fork/vfork/clone event is: a thread of ours, another process
  // that shares our memory (kept and traced: our int3 bytes are in its text), or a process
  // with a copy of our memory (its copy of the int3 bytes is removed and it is let go). Decided
  // by thread-group and address-space membership, not by which event the kernel reported:
  // clone(CLONE_VM|SIGCHLD) reports a fork, clone(0) a clone. Nothing when there is nothing to
  // track (the parent or the child is gone).
  std::optional<NewTask> new_task_of(Task& parent);
  // Makes `child` one of our tasks; `first_stop`: its first stop, if it came before its
  // parent's event. Returns its tid when it is ready to run (on_new_task).
  pid_t add_new_task(const NewTask& child, Task& parent, std::optional<WaitStatus> first_stop);
  // The first stop of a task made by fork/clone: resumed, held, or released by its kind.
  // False when the task is held or gone (nothing for the caller to resume).
  bool on_first_stop(Task& task);
  // Called with each new thread (or task sharing our memory) and its thread pointer (fs_base)
  // at its parent's clone event, before it runs anything (per-thread state of call probes); and
  // with a thread back from vfork() at its PTRACE_EVENT_VFORK_DONE stop, before it runs again: the
  // child that ran on its thread pointer meanwhile has exec'd or exited.
  void set_new_thread_observer(std::function<void(pid_t, std::uint64_t)> f) {
    new_thread_ = std::move(f);
  }
  // Called with each new thread, its thread pointer and the stack pointer it starts with (the
  // clone's stack argument; 0 when the clone gave none), at its parent's clone event, before
  // it runs anything (its stack bounds, for the jump probes' stack snapshots).
  void set_new_stack_observer(std::function<void(pid_t, std::uint64_t, std::uint64_t)> f) {
    new_stack_ = std::move(f);
  }
  // Called with a thread at its PTRACE_EVENT_EXIT stop (its name is still there), once
  // report_thread_exits() has asked for those stops; it is resumed after, as any event stop.
  void set_thread_exit_observer(std::function<void(pid_t)> f) { thread_exit_ = std::move(f); }
  // From now on every thread stops at its exit (PTRACE_O_TRACEEXIT, on each stopped task and
  // inherited by the threads they make): a thread's name can be read there.
  void report_thread_exits();

  // This process is a fork child of `parent`: wait for its first stop unless it came
  // (`first_stop`), then take over the copy of the parent's probes its memory holds: the int3
  // sites as they are, each jump put back to the original bytes with an int3 over its first
  // (the jump's trampoline and counters are the parent's, in memory both share).
  void take_over_fork(TracedProcess& parent, std::optional<WaitStatus> first_stop,
                      bool with_guardian = true);
  // This process is one that shared a member's memory and exec'd: its task `tid` reported the
  // exec (`ws`). The tracer runs it to its entry point and probes its new image.
  void take_exec_of_sharer(pid_t tid, WaitStatus ws);
  // A process that shared our memory exec'd (it has an address space of its own now, without
  // our bytes): let go of it, or hand it over (the family follows it as a process of its own).
  void release_sharer(Task& task);
  void hand_over_sharer(pid_t tid);

  // System calls and function calls run in the tracee (remote_calls.hpp).
  RemoteCalls& calls() { return calls_; }
  // RemoteProcess, for the int3 floor (tracer/int3/): the same, by thread ID
  // (tracer/core/process_remote.cpp).
  std::vector<pid_t> thread_ids(bool stopped_only) override;
  std::optional<std::uint64_t> thread_blocked_signals(pid_t tid) override;
  bool set_thread_blocked_signals(pid_t tid, std::uint64_t mask) override;
  std::optional<CallThread> call_thread() override;
  std::optional<long> remote_syscall(long nr, const std::array<long, 6>& args,
                                     pid_t via = 0) override;
  bool in_one_lending(const std::function<void()>& body) override;

  // Brings a stopped thread to an interrupt stop, which holds no signal and no step flag (a
  // step's SIGTRAP, the step flag, a signal stop's signal: each would reach the thread were
  // probecost to die), before it is given back its registers; signals that come first are kept
  // for it (remote_calls_stepped.cpp says why).
  void park_at_interrupt(TaskRef ref);

  // Maps one executable scratch page in the tracee, as close to `near` as possible (an mmap
  // injected into `via`, or any stopped thread), its first slot a header of ours. Detach unmaps
  // it where no thread is in it (process_scratch_pages.cpp).
  // Nothing when no thread can run it now (every thread running, or held in a group-stop).
  std::optional<RuntimeAddr> map_scratch(RuntimeAddr near, Task* via = nullptr);

  bool has_guardian() const { return guardian_ != nullptr; }
  // Our trampolines read the threads' rseq cpu_id (so hide_rseq_cpu from vfork() children).
  void note_rseq_trampolines() { rseq_trampolines_ = true; }
  // Where the time goes while every thread is held stopped for the probes to go in: attach()
  // starts it as it stops the threads; each step marks its phase, the caller stops it once
  // they run again.
  PhaseClock& held() { return held_; }

  // The trap area of this process's int3 probes (tracer/int3/int3_area.hpp), mapped near `near`
  // the first time, every thread stopped: from then on every int3 written is recorded there
  // first, and its SIGTRAP handler stands in for us should we die. Nothing when it cannot be
  // mapped now (the probes go in unrecorded, the guardian their only backstop).
  Int3Area* ensure_int3_area(RuntimeAddr near);
  Int3Area* int3_area() { return int3_area_.get(); }

  // A USDT probe that reads the semaphore at `at` is in (every thread stopped): raised by one
  // for the first (tracer/core/semaphores.hpp), lowered by detach() on its way out and by the
  // guardian if we die. forget: the probe went with its library (dlclose), nothing to lower.
  // `witness`: the probe's site, whose bytes tell whether a fork child's copy holds the raise.
  // The first raise maps the table of raises restore reads (semaphore_table.hpp).
  void raise_semaphore(RuntimeAddr at, RuntimeAddr witness);
  void forget_semaphore(RuntimeAddr at);

  // Watches over our int3 bytes from a separate process that puts them back if probecost
  // dies (SIGKILL, OOM) before it could. For processes we attached to.
  void start_guardian();

  // Puts back every original byte, rewinds threads stopped on our int3 (including one whose
  // trap is still queued behind another stop), and detaches: the process runs on untraced.
  // Idempotent.
  void detach();
  // SIGKILL and reap. Idempotent.
  void kill();
  // /proc/PID/maps and the mapping at an address, as the address space keeps them.
  std::vector<Mapping> maps() override { return space_.maps(); }
  const Mapping* mapping_at(RuntimeAddr at) override { return space_.mapping_at(at); }
  // AddressSpace::forget_moved_code, and the trap area's records of the int3 sites it forgot.
  // detach() and kill() do this before restoring; the trace does it when the dynamic linker's
  // map changes.
  std::vector<LeftAlone> forget_moved_code();
  // What detach() and kill() left alone (forget_moved_code), for the user.
  const std::vector<std::string>& left_alone() const { return left_alone_; }
  // What attach() found a killed probecost had left in the threads, and did (left_loops.hpp).
  const std::vector<std::string>& found_at_attach() const { return found_at_attach_; }

  // Tasks detach() could not let go of (not in a ptrace-stop): for release_leftovers.
  const std::vector<pid_t>& leftovers() const { return leftovers_; }

 private:
  TracedProcess(pid_t pid, bool launched, EventSource& events);
  void seize_all_threads();
  void task_gone(pid_t tid, WaitStatus ws);
  // PTRACE_EVENT_EXEC of a thread of ours.
  void on_exec(Task& task);
  bool will_report(Task& task);
  void release_fork_child(Task& child);
  void release_fork_child_fully(Task& child);
  void free_stopped_for_calls(Task& t);  // detach's: a job-control stop may run injected calls
  void free_a_thread_for_calls();        // detach's: signals held in every thread delivered
  // Detach's fix-up of one stopped task: a thread whose int3 trapped is rewound onto the site,
  // and its SIGTRAP consumed, before the byte goes back.
  void fix_up_trap(Task& task);
  bool consume_queued_sigtrap(Task& task, RuntimeAddr site);
  bool is_our_trap_at(RuntimeAddr site);
  void detach_vfork_waiters();
  void remove_patches();
  void let_go_of_int3_area();
  void let_go_of_semaphore_table();
  void adopt_int3_area(std::unique_ptr<Int3Area> area);
  void leave_moved_code();  // forget_moved_code(), its notes kept in left_alone_
  // Detach's: each stopped thread inside one of our jump areas let run alone, and interrupted,
  // until it has left it (process_run_out.cpp; why not, for OurMappings::release), a step at a
  // time.
  struct RunOutStep {
    enum class Is { Going, Done, Stuck } is = Is::Going;
    std::string why;  // when Stuck
    static RunOutStep going() { return {}; }
    static RunOutStep done() { return {Is::Done, {}}; }
    static RunOutStep stuck(std::string why) { return {Is::Stuck, std::move(why)}; }
  };
  void run_out_of_our_areas();
  RunOutStep may_run_out(TaskRef ref);
  RunOutStep still_inside(TaskRef ref, const std::vector<OurMapping>& areas);
  RunOutStep resume_for_run(TaskRef ref);
  RunOutStep stop_after_run(TaskRef ref);
  void settle_new_tasks();
  void hide_rseq_cpu(Task& parent);  // its rseq cpu_id -1 while a vfork child runs on it
  void unhide_rseq_cpu(Task& parent);

  pid_t pid_;
  bool launched_;
  EventSource& events_;
  ThreadSet threads_{pid_};
  AddressSpace space_{pid_, threads_};
  std::function<void(pid_t, std::uint64_t)> new_thread_;
  std::function<void(pid_t, std::uint64_t, std::uint64_t)> new_stack_;
  std::function<void(pid_t)> thread_exit_;
  std::map<pid_t, std::pair<RuntimeAddr, std::uint32_t>> hidden_cpu_;  // cpu_id's at, value
  bool rseq_trampolines_ = false;
  std::optional<WaitStatus> end_;
  std::optional<double> end_cpu_seconds_;
  double children_cpu_at_launch_ = 0;
  bool detached_ = false, exec_ended_ = false;
  bool letting_go_ =
      false;  // in detach(): a group-stop is as good a stop as any (process_detach.cpp)
  std::unique_ptr<Guardian> guardian_;
  Semaphores semaphores_;
  std::unique_ptr<Int3Area> int3_area_;
  bool int3_area_tried_ = false, semaphore_table_tried_ = false;
  std::vector<pid_t> leftovers_;
  std::vector<std::string> left_alone_, found_at_attach_;
  PhaseClock held_;
  RemoteCalls calls_{*this, events_};
};

// Stops every task of `proc` but `keep` (stop_all) for its lifetime, and resumes them whatever
// happens (resume_stopped): around a step-over that removes an int3, or injected code.
class OthersStopped {
 public:
  OthersStopped(TracedProcess& proc, pid_t keep) : proc_(proc), stopped_(proc.stop_all(keep)) {}
  ~OthersStopped();
  OthersStopped(const OthersStopped&) = delete;
  OthersStopped& operator=(const OthersStopped&) = delete;

 private:
  TracedProcess& proc_;
  std::vector<pid_t> stopped_;
};

}  // namespace probecost
