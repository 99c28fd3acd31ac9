#pragma once
// Family: a traced process and the processes it forks that we follow (`trace
// --follow-forks`), each with its own TracedProcess (its own address space: its own memory,
// sites and jumps), and one event stream for them all.
//
// ptrace reports every traced task of ours through the same waitpid(-1, __WALL): a wait made
// on behalf of one process (stopping its threads, single-stepping one) also sees the others'
// events. Each is handed to the process that owns the task, whose bookkeeping absorbs it and
// keeps it for its event loop, exactly as it keeps its own threads' events meanwhile. A new
// process's first stop can come before its parent's fork event (the kernel does not order
// them): it is held here until the parent's event says what it is.
#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "tracer/process.hpp"

namespace probecost {

class Family {
 public:
  // A family of one: fork children are cleaned and let go, as without a family, until
  // set_following(true).
  explicit Family(std::unique_ptr<TracedProcess> root);
  ~Family();
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  TracedProcess& root() { return *members_.front(); }
  // While following, a fork (or vfork + exec) child becomes a member; otherwise, and once the
  // trace is letting go of everything, it is cleaned of our bytes and let go.
  void set_following(bool on) { following_ = on; }
  bool following() const { return following_; }

  const std::vector<std::unique_ptr<TracedProcess>>& members() const { return members_; }
  // The member that made `member` (nullptr for the root).
  TracedProcess* parent_of(const TracedProcess& member) const;
  // Members made since the last call, oldest first: they are stopped, waiting for their
  // tracer-level set-up (a fork child: its step-over; an exec'd one: its new image's probes).
  std::vector<TracedProcess*> take_new_members();
  bool any_alive() const;

  // The next event of any member: a deferred one first, then waitpid(-1). Nothing when the
  // wait was interrupted (errno EINTR) or no traced task is left (ECHILD).
  std::optional<std::pair<TracedProcess*, TaskEvent>> next_event();

  // ---- for TracedProcess -------------------------------------------------------------------
  // The member a task belongs to: the one that has it, or whose process it is a thread of.
  TracedProcess* owner(pid_t tid);
  // Hands `ev`, seen by a wait of `asker`, to its owner. True when it is the asker's.
  bool route(const TaskEvent& ev, TracedProcess& asker);
  // The first stop of a task nobody owned when it came, if it did.
  std::optional<WaitStatus> take_orphan(pid_t tid);
  TracedProcess& add_member(std::unique_ptr<TracedProcess> member, TracedProcess& parent);

 private:
  std::vector<std::unique_ptr<TracedProcess>> members_;  // the root first
  std::map<const TracedProcess*, TracedProcess*> parents_;
  std::map<pid_t, WaitStatus> orphans_;
  std::size_t handed_out_ = 1;           // members before this index have been taken
  TracedProcess* last_owner_ = nullptr;  // the owner found last: most events are its
  bool following_ = false;
};

}  // namespace probecost
