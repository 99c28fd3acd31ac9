#pragma once
// ThreadSet: the tasks of one traced process by thread ID (rr's task set beside its
// AddressSpace): its threads, the tasks that share its memory (a vfork child, a clone(CLONE_VM)
// child) and fork children not yet let go, with which thread waits in vfork() for which child.
// It answers what can be known without waiting: which task a tid names, which thread's /proc
// entry shows the memory, whether the memory can be changing. Waiting, stopping and resuming
// stay with TracedProcess, the one that talks to the event owner.
#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <map>

#include "tracer/core/task.hpp"

namespace probecost {

class ThreadSet {
 public:
  using Map = std::map<pid_t, Task>;
  explicit ThreadSet(pid_t pid) : pid_(pid) {}

  Map::iterator begin() { return tasks_.begin(); }
  Map::iterator end() { return tasks_.end(); }
  Map::const_iterator begin() const { return tasks_.begin(); }
  Map::const_iterator end() const { return tasks_.end(); }
  bool empty() const { return tasks_.empty(); }
  std::size_t size() const { return tasks_.size(); }
  bool has(pid_t tid) const { return tasks_.count(tid) != 0; }

  Task* find(pid_t tid);
  // The Task `ref` names, if it still exists: after anything that waits (stop_all), a thread
  // may have been reaped, or ended by another thread's exec, and its Task destroyed.
  Task* find(const TaskRef& ref) {
    Task* t = find(ref.tid);
    return t && t->ref().serial == ref.serial ? t : nullptr;
  }
  Task& at(pid_t tid) { return tasks_.at(tid); }
  // The task `tid` (made with `role` when it is new; an existing one keeps its role).
  Task& add(pid_t tid, Task::Role role) { return tasks_.try_emplace(tid, tid, role).first->second; }
  void erase(pid_t tid) { tasks_.erase(tid); }
  template <typename Pred>
  void erase_if(Pred pred) {
    std::erase_if(tasks_, [&](const auto& kv) { return pred(kv.second); });
  }
  void clear() { tasks_.clear(); }

  std::size_t thread_count() const;  // threads of the process itself (not memory sharers)
  // A thread whose /proc entry shows the process's memory: the leader, or while the leader is
  // a zombie (it called pthread_exit), a live thread (/proc/TID/maps of any thread works).
  pid_t proc_tid() const;
  // True when nothing can be changing the memory's mappings: every task that runs in it is in
  // a ptrace-stop or exiting, and none waits in vfork() (its child, which we may not trace,
  // runs in the memory meanwhile). A fork child has a memory of its own.
  bool memory_at_rest() const;

  // `parent` waits in vfork() for `child`, from when it is resumed until the child execs or
  // exits (or is handed over); vfork_ended(child) says it is out.
  void entered_vfork(Task& parent, pid_t child);
  void vfork_ended(pid_t child);

 private:
  pid_t pid_;
  Map tasks_;
  std::map<pid_t, pid_t> vfork_parent_;  // vfork child -> the thread waiting in vfork()
};

}  // namespace probecost
