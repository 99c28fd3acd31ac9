// TracedProcess as a RemoteProcess (tracer/os/remote_process.hpp): what the int3 floor asks of
// a process, by thread ID, answered from the tasks.
#include <sys/user.h>

#include "tracer/core/process.hpp"

namespace probecost {

std::vector<pid_t> TracedProcess::thread_ids(bool stopped_only) {
  std::vector<pid_t> out;
  for (const auto& [tid, task] : threads_) {
    if (!stopped_only || task.stopped()) out.push_back(tid);
  }
  return out;
}

std::optional<std::uint64_t> TracedProcess::thread_blocked_signals(pid_t tid) {
  Task* t = task(tid);
  if (!t || !t->stopped()) return std::nullopt;
  return t->blocked_signals();
}

bool TracedProcess::set_thread_blocked_signals(pid_t tid, std::uint64_t mask) {
  Task* t = task(tid);
  return t && t->stopped() && t->set_blocked_signals(mask);
}

std::optional<RemoteProcess::CallThread> TracedProcess::call_thread() {
  Task* t = calls_.lent() ? task(calls_.lent()) : calls_.any_stopped_thread();
  const user_regs_struct* regs = t ? t->regs() : nullptr;
  if (!regs) return std::nullopt;
  return CallThread{t->tid(), regs->rsp};
}

std::optional<long> TracedProcess::remote_syscall(long nr, const std::array<long, 6>& args,
                                                  pid_t via) {
  Task* t = nullptr;
  if (via != 0) {
    t = task(via);
    if (!t) return std::nullopt;
  }
  return calls_.syscall(nr, args, t);
}

bool TracedProcess::in_one_lending(const std::function<void()>& body) {
  return calls_.in_one_lending(body);
}

}  // namespace probecost
