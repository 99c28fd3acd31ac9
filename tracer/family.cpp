#include "tracer/family.hpp"

#include <cerrno>

#include "common/error.hpp"
#include "tracer/proc_files.hpp"
#include "tracer/syscalls.hpp"

namespace probecost {

Family::Family(std::unique_ptr<TracedProcess> root) {
  root->family_ = this;
  members_.push_back(std::move(root));
}

Family::~Family() {
  following_ = false;  // a fork seen while letting go is cleaned and let go, not followed
  // Children first: each lets go of its own tasks (their events may still be on the way to a
  // wait of another member, which must still be able to hand them over), the root last.
  while (!members_.empty()) {
    std::unique_ptr<TracedProcess> m = std::move(members_.back());
    members_.pop_back();
    last_owner_ = nullptr;
    m.reset();  // its own waits still find its tasks (route asks the asker first)
    last_owner_ = nullptr;
  }
}

TracedProcess* Family::parent_of(const TracedProcess& member) const {
  auto it = parents_.find(&member);
  return it == parents_.end() ? nullptr : it->second;
}

std::vector<TracedProcess*> Family::take_new_members() {
  std::vector<TracedProcess*> out;
  for (; handed_out_ < members_.size(); ++handed_out_) out.push_back(members_[handed_out_].get());
  return out;
}

bool Family::any_alive() const {
  for (const auto& m : members_) {
    if (m->alive() || m->exec_ended()) return true;
  }
  return false;
}

TracedProcess* Family::owner(pid_t tid) {
  // On the hit path: the process of the last event first (hits come in runs), then the newest
  // members first, past those that are over (a shell's ended children pile up).
  if (last_owner_ && last_owner_->task(tid)) return last_owner_;
  for (auto it = members_.rbegin(); it != members_.rend(); ++it) {
    TracedProcess& m = **it;
    if (m.tasks().empty()) continue;
    if (m.task(tid)) return last_owner_ = &m;
  }
  // A thread not known yet (its first stop before its parent's clone event) belongs to the
  // process it is a thread of. A task that is gone already has no /proc entry: nobody's.
  pid_t tgid = tgid_of(tid);
  for (auto& m : members_) {
    if (tgid && m->pid() == tgid && !m->detached() && !m->end()) return m.get();
  }
  return nullptr;
}

bool Family::route(const TaskEvent& ev, TracedProcess& asker) {
  if (asker.task(ev.tid)) return true;
  TracedProcess* o = owner(ev.tid);
  if (o == &asker) return true;
  if (!o) {
    // A new process (or a process sharing a member's memory) whose parent's event has not
    // been seen: held until it is. A task that is gone is nobody's to report.
    if (!ev.status.gone()) orphans_.insert_or_assign(ev.tid, ev.status);
    return false;
  }
  if (Task* t = o->absorb(ev.tid, ev.status)) o->defer(*t, ev.status);
  return false;
}

std::optional<WaitStatus> Family::take_orphan(pid_t tid) {
  auto it = orphans_.find(tid);
  if (it == orphans_.end()) return std::nullopt;
  WaitStatus ws = it->second;
  orphans_.erase(it);
  return ws;
}

TracedProcess& Family::add_member(std::unique_ptr<TracedProcess> member, TracedProcess& parent) {
  member->family_ = this;
  parents_[member.get()] = &parent;
  members_.push_back(std::move(member));
  return *members_.back();
}

std::optional<std::pair<TracedProcess*, TaskEvent>> Family::next_event() {
  for (auto& m : members_) {
    if (auto ev = m->next_deferred()) return std::make_pair(m.get(), *ev);
  }
  int status = 0;
  pid_t tid = sys::wait_for(-1, &status, __WALL, true);
  if (tid < 0) {
    if (errno == EINTR || errno == ECHILD) return std::nullopt;
    throw Error::from_errno("waitpid");
  }
  TaskEvent ev{tid, WaitStatus(status)};
  TracedProcess* o = owner(tid);
  if (!o) {
    if (!ev.status.gone()) orphans_.insert_or_assign(tid, ev.status);
    errno = EINTR;  // nothing for the loop: it looks at its flags and asks again
    return std::nullopt;
  }
  o->absorb(tid, ev.status);
  return std::make_pair(o, ev);
}

}  // namespace probecost
