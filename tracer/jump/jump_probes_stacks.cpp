// Stack snapshots in jump probes (breakpoint/in_tracee/stack_record.hpp): each thread's stack
// bounds entered in the call buffer's thread table, which the trampolines look up by thread
// pointer before they copy. The bounds are what the tracer can prove from /proc/PID/maps:
//   - the main thread: the "[stack]" mapping's end, down to its end less RLIMIT_STACK (the
//     kernel grows it no further) but never below the mapping under it;
//   - another thread: the mapping its stack pointer is in, at the attach (every thread
//     stopped) or at its clone (the child's stack argument, before it runs), but no higher
//     than the top of its own stack: at its clone, the page of its first stack pointer; at the
//     attach, its thread pointer when that is above its stack pointer in the same mapping
//     (glibc puts struct pthread, the static TLS under it, at the top of every thread's stack,
//     its own or one given by pthread_attr_setstack). The rest of the mapping is not the
//     thread's: a program that gave it the lower part of a bigger mmap may unmap the upper
//     part while it runs, and a copy up to the mapping's end would fault in the trampoline.
// A thread on another stack at the moment its bounds are taken (a coroutine, a sigaltstack at
// the attach) gets that mapping's bounds: a copy never leaves it while the mapping stays.
#include <sys/resource.h>
#include <sys/user.h>

#include <fstream>
#include <sstream>

#include "breakpoint/in_tracee/stack_record.hpp"
#include "tracer/jump/jump_probes.hpp"

namespace probecost {

namespace {

// RLIMIT_STACK's soft limit of `pid` (/proc/PID/limits); 0 when unlimited or unreadable.
std::uint64_t stack_limit(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/limits");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Max stack size", 0) != 0) continue;
    std::istringstream words(line.substr(14));
    std::string soft;
    words >> soft;
    return soft == "unlimited" ? 0 : std::stoull(soft);
  }
  return 0;
}

}  // namespace

std::optional<std::pair<std::uint64_t, std::uint64_t>> JumpProbes::stack_bounds(
    pid_t tid, std::uint64_t sp, std::uint64_t top, const std::vector<Mapping>& maps) const {
  for (std::size_t i = 0; i < maps.size(); ++i) {
    const Mapping& m = maps[i];
    bool main = tid == proc_.pid() && m.path == "[stack]";
    if (!main && !m.contains(RuntimeAddr(sp))) continue;
    if (!m.read || !m.write) return std::nullopt;
    std::uint64_t hi = m.end.value(), lo = m.start.value();
    if (!main && top > sp && top < hi) hi = top;
    if (main) {
      std::uint64_t limit = stack_limit(proc_.pid());
      std::uint64_t below = i ? maps[i - 1].end.value() : 0;
      lo = limit && limit < hi ? std::max(hi - limit, below) : below;
    }
    return std::pair{lo, hi};
  }
  return std::nullopt;
}

jump::ThreadTable JumpProbes::thread_table() {
  return jump::ThreadTable(
      std::span(stack_buffer_.view + stack_layout_.threads_offset, jump::kThreadTableBytes));
}

void JumpProbes::enter_stacks_of_threads() {
  if (!stack_reader_) return;
  auto maps = proc_.maps();
  for (auto& [tid, task] : proc_.threads()) {
    const user_regs_struct* r = task.regs();
    if (!r) continue;
    enter_stack(tid, r->fs_base, r->rsp, r->fs_base, maps);
  }
}

void JumpProbes::enter_new_thread(pid_t tid, std::uint64_t tp, std::uint64_t sp) {
  if (!stack_reader_ || !sp) return;
  // Its frames are all below its first stack pointer, but for what the clone's caller put
  // there for the child to pop (glibc's clone(2) wrapper: the function and its argument, 16
  // bytes): up to the end of that page.
  constexpr std::uint64_t kPage = 4096;
  std::uint64_t top = (sp + 16 + kPage - 1) & ~(kPage - 1);
  enter_stack(tid, tp, sp - 1, top, proc_.maps());
}

void JumpProbes::enter_stack(pid_t tid, std::uint64_t tp, std::uint64_t sp, std::uint64_t top,
                             const std::vector<Mapping>& maps) {
  auto bounds = stack_bounds(tid, sp, top, maps);
  if (!bounds || !thread_table().enter(tp, bounds->first, bounds->second)) {
    ++unbounded_threads_;
    return;
  }
  stack_tps_[tid] = tp;
}

void JumpProbes::forget_thread(pid_t tid) {
  auto it = stack_tps_.find(tid);
  if (it == stack_tps_.end()) return;
  std::uint64_t tp = it->second;
  stack_tps_.erase(it);
  // A thread that shared it (a new one on the same TCB, entered since) keeps its entry.
  for (const auto& [other, other_tp] : stack_tps_)
    if (other_tp == tp) return;
  if (stack_reader_) thread_table().forget(tp);
}

}  // namespace probecost
