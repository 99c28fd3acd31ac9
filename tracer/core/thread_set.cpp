// ThreadSet (thread_set.hpp): lookups over the tasks of one traced process.
#include "tracer/core/thread_set.hpp"

#include "tracer/core/task.hpp"

namespace probecost {

Task* ThreadSet::find(pid_t tid) {
  auto it = tasks_.find(tid);
  return it == tasks_.end() ? nullptr : &it->second;
}

std::size_t ThreadSet::thread_count() const {
  return std::count_if(tasks_.begin(), tasks_.end(),
                       [](const auto& kv) { return kv.second.role() == Task::Role::Thread; });
}

pid_t ThreadSet::proc_tid() const {
  // A leader in a ptrace-stop of ours cannot exit before we resume it (a SIGKILL ends every
  // thread, and no answer helps then): its state need not be read (the hold asks ~15 times).
  if (auto leader = tasks_.find(pid_); leader != tasks_.end() && leader->second.stopped())
    return pid_;
  if (task_state_letter(pid_) != 'Z') return pid_;
  for (const auto& [tid, t] : tasks_) {
    if (t.role() == Task::Role::Thread && task_state_letter(tid) != 'Z') return tid;
  }
  return pid_;
}

bool ThreadSet::memory_at_rest() const {
  return std::all_of(tasks_.begin(), tasks_.end(), [](const auto& kv) {
    const Task& t = kv.second;
    if (t.role() == Task::Role::ForkChild) return true;
    return (t.stopped() || t.state() == Task::State::Exiting) && !t.in_vfork;
  });
}

void ThreadSet::entered_vfork(Task& parent, pid_t child) {
  parent.in_vfork = true;
  vfork_parent_[child] = parent.tid();
}

void ThreadSet::vfork_ended(pid_t child) {
  auto vp = vfork_parent_.find(child);
  if (vp == vfork_parent_.end()) return;
  if (Task* parent = find(vp->second)) parent->in_vfork = false;
  vfork_parent_.erase(vp);
}

}  // namespace probecost
