#include "tracer/core/family.hpp"

#include <sys/wait.h>

#include <cerrno>

#include "common/error.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

std::unique_ptr<Family> Family::launch(const LaunchSpec& spec) {
  std::unique_ptr<Family> f(new Family);
  f->members_.push_back(TracedProcess::launch(spec, *f));
  return f;
}

std::unique_ptr<Family> Family::attach(pid_t pid, bool with_guardian) {
  std::unique_ptr<Family> f(new Family);
  f->members_.push_back(TracedProcess::attach(pid, *f, with_guardian));
  return f;
}

Family::~Family() {
  following_ = false;  // a fork seen while letting go is cleaned and let go, not followed
  // Children first: each lets go of its own tasks (their events may still be on the way to a
  // wait of another member, which must still be able to hand them over), the root last. A
  // member being let go is out of members_, but its own waits still find its tasks (book
  // asks the asker first).
  while (!members_.empty()) {
    std::unique_ptr<TracedProcess> m = std::move(members_.back());
    members_.pop_back();
    const TracedProcess* gone = m.get();
    m.reset();
    std::erase_if(owners_, [gone](const auto& kv) { return kv.second == gone; });
    std::erase_if(held_, [gone](const Held& h) { return h.process == gone; });
  }
}

TracedProcess* Family::parent_of(const TracedProcess& member) const {
  auto it = parents_.find(&member);
  return it == parents_.end() ? nullptr : it->second;
}

TracedProcess& Family::attach_another(pid_t pid, bool with_guardian) {
  members_.push_back(TracedProcess::attach(pid, *this, with_guardian));
  attached_.insert(members_.back().get());
  return *members_.back();
}

std::vector<TracedProcess*> Family::take_new_members() {
  std::vector<TracedProcess*> out;
  for (; handed_out_ < members_.size(); ++handed_out_) {
    if (!attached_.count(members_[handed_out_].get())) out.push_back(members_[handed_out_].get());
  }
  return out;
}

bool Family::any_alive() const {
  for (const auto& m : members_) {
    // A process whose every task is gone is over, even if its end was never reported (a leader
    // that was a zombie already when we attached).
    if ((m->alive() && !m->threads().empty()) || m->exec_ended()) return true;
  }
  return false;
}

TracedProcess& Family::add_member(std::unique_ptr<TracedProcess> member, TracedProcess& parent) {
  parents_[member.get()] = &parent;
  members_.push_back(std::move(member));
  return *members_.back();
}

// ---- the event stream ------------------------------------------------------------------------

std::optional<TaskEvent> Family::wait_any() {
  none_left_ = false;
  collect_held();
  if (!reaped_.empty()) {
    TaskEvent ev = reaped_.front();
    reaped_.pop_front();
    return ev;
  }
  siginfo_t info;
  pid_t tid = sys::peek_any(&info, true);
  if (tid < 0) {
    none_left_ = errno == ECHILD;
    if (errno == EINTR || errno == ECHILD) return std::nullopt;
    throw Error::from_errno("waitid");
  }
  WaitStatus ws = WaitStatus::of(info);
  if (ws.signal_stop()) {
    peeked_ = tid;  // held or collected once booked (hold_or_collect)
    return TaskEvent{tid, ws};
  }
  // Nothing to keep in the kernel: collected at once, as the kernel reports it now. Never
  // blocking: a stopped task killed since the peek (exit_group) may not be reportable again
  // for a while (a leader, until its other threads are reaped); its stop is handled as seen,
  // and its end comes later.
  int status = 0;
  if (sys::wait_for(tid, &status, __WALL | WNOHANG) == tid) ws = WaitStatus(status);
  return TaskEvent{tid, ws};
}

void Family::hold_or_collect(TracedProcess* o, const TaskEvent& ev) {
  if (peeked_ != ev.tid) return;
  peeked_ = 0;
  Task* t = o ? o->task(ev.tid) : nullptr;
  if (t && t->stopped()) {
    t->hold();
    held_.push_back({o, t->ref()});
    return;
  }
  collect(ev.tid, true);  // nobody's yet (an orphan, kept as such): nothing to hold it by
}

void Family::collect(pid_t tid, bool peeked) {
  int status = 0;
  if (sys::wait_for(tid, &status, __WALL | WNOHANG) != tid) return;  // nothing reportable now
  WaitStatus ws(status);
  if (peeked && ws.stopped()) return;  // the stop already reported: it was never resumed
  reaped_.push_back({tid, ws});
}

void Family::collect_held() {
  std::vector<Held> held;
  held.swap(held_);
  for (const Held& h : held) {
    Task* t = h.process->task(h.task);
    if (t && !t->held()) continue;  // resumed since: nothing left to collect
    if (t) t->taken();
    collect(h.task.tid, t != nullptr);
  }
}

void Family::take_stop(Task& task) {
  if (!task.held()) return;
  task.taken();
  collect(task.tid(), true);
}

TracedProcess* Family::owner(pid_t tid, TracedProcess* asker) {
  // The asker first: it may not be a member yet (attaching) or any more (letting go).
  if (asker && asker->task(tid)) return asker;
  // On the hit path: one look-up, checked against the member's own tasks (a tid is reused
  // once its task is gone, and an exec'ing thread takes its leader's).
  if (auto it = owners_.find(tid); it != owners_.end() && it->second->task(tid)) return it->second;
  // The newest members first, past those that are over (a shell's ended children pile up).
  for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
    TracedProcess& m = **it;
    if (!m.threads().empty() && m.task(tid)) return owners_[tid] = &m;
  }
  // A thread not known yet (its first stop before its parent's clone event) belongs to the
  // process it is a thread of. A task that is gone already has no /proc entry: nobody's.
  pid_t tgid = tgid_of(tid);
  auto is_thread_of = [tgid](const TracedProcess& m) {
    return tgid && m.pid() == tgid && !m.detached() && !m.end();
  };
  if (asker && is_thread_of(*asker)) return asker;
  for (auto& m : members_) {
    if (is_thread_of(*m)) return m.get();
  }
  return nullptr;
}

TracedProcess* Family::book(const TaskEvent& ev, TracedProcess* asker) {
  TracedProcess* o = owner(ev.tid, asker);
  if (!o) {
    // A new process (or a process sharing a member's memory) whose parent's event has not
    // been seen: held until it is. A task that is gone is nobody's to report.
    if (!ev.status.gone()) orphans_.insert_or_assign(ev.tid, ev.status);
    return nullptr;
  }
  Task* t = o->update_from(ev);
  if (ev.status.gone()) owners_.erase(ev.tid);
  if (t && ev.status.ptrace_event() == PTRACE_EVENT_EXEC && t->role() != Task::Role::Thread) {
    on_exec_of_sharer(*o, *t);
  }
  return o;
}

void Family::on_exec_of_sharer(TracedProcess& from, Task& t) {
  // A vfork child (or another process that shared a member's memory) exec'd: it has its own
  // address space now, without our bytes. It is let go, or followed as a member of its own,
  // stopped at its exec.
  if (!following_ || t.role() != Task::Role::MemorySharer) {
    from.release_sharer(t);
    return;
  }
  pid_t tid = t.tid();
  WaitStatus ws = t.last_stop();
  pid_t tgid = tgid_of(tid);
  from.hand_over_sharer(tid);
  TracedProcess& member = add_member(TracedProcess::follower(tgid ? tgid : tid, *this), from);
  member.take_exec_of_sharer(tid, ws);
  if (from.has_guardian()) member.start_guardian();
}

void Family::defer(Task& task, WaitStatus ws) {
  TracedProcess* o = owner(task.tid(), nullptr);
  task.deferred = o ? o->park_trap(task, ws) : ws;
  deferred_.push_back(task.tid());
}

std::optional<FamilyEvent> Family::next_deferred() {
  while (!deferred_.empty()) {
    pid_t tid = deferred_.front();
    deferred_.pop_front();
    TracedProcess* o = owner(tid, nullptr);
    Task* t = o ? o->task(tid) : nullptr;
    // Entries whose event was handled elsewhere (detach) or whose task is gone are stale.
    if (!t || !t->deferred) continue;
    WaitStatus ws = *t->deferred;
    t->deferred.reset();
    return FamilyEvent{o, TaskEvent{tid, ws}};
  }
  return std::nullopt;
}

std::optional<FamilyEvent> Family::next_event() {
  if (auto ev = next_deferred()) return ev;
  auto ev = wait_any();
  if (!ev) return std::nullopt;
  TracedProcess* o = book(*ev, nullptr);
  hold_or_collect(o, *ev);
  if (!o) return std::nullopt;  // nothing for the loop: it looks at its flags and asks again
  return FamilyEvent{o, *ev};
}

std::optional<TaskEvent> Family::next_event_of(TracedProcess& asker) {
  for (;;) {
    auto ev = wait_any();
    if (!ev) return std::nullopt;
    TracedProcess* o = book(*ev, &asker);
    hold_or_collect(o, *ev);
    if (o == &asker) return ev;
    // Another member's: kept for the event loop.
    if (Task* t = o ? o->task(ev->tid) : nullptr) defer(*t, ev->status);
  }
}

// ---- new tasks -------------------------------------------------------------------------------

std::optional<WaitStatus> Family::take_orphan(pid_t tid) {
  auto it = orphans_.find(tid);
  if (it == orphans_.end()) return std::nullopt;
  WaitStatus ws = it->second;
  orphans_.erase(it);
  return ws;
}

pid_t Family::on_new_task(TracedProcess& process, Task& parent) {
  auto child = process.new_task_of(parent);
  if (!child) return 0;
  std::optional<WaitStatus> first_stop = take_orphan(child->tid);
  if (child->role == Task::Role::ForkChild && following_ && !process.task(child->tid)) {
    add_member(TracedProcess::follower(child->tid, *this), process)
        .take_over_fork(process, first_stop);
    return 0;  // stopped until the tracer has set it up
  }
  return process.add_new_task(*child, parent, first_stop);
}

}  // namespace probecost
