// A thread stopped inside a restartable sequence of the program's, taken out of it before an
// injected call borrows it (issue 23 §1c).
//
// The stop scheduled the thread out, so the kernel aborts its sequence when it next returns to
// user space: rseq_ip_fixup() sends it to the sequence's abort handler if its RIP is still in
// [start_ip, start_ip + post_commit_offset), and otherwise only clears rseq_cs. An injected
// call resumes the thread at the vDSO's `syscall`, outside the sequence: the kernel cleared
// rseq_cs there, and the thread, given back its registers, went on inside the sequence with no
// abort to come (a per-CPU commit after a migration, unguarded: the program's data torn). So
// the abort is done first, as the kernel would have done it: RIP = abort_ip, with the checks
// the kernel makes (the descriptor's bounds, the signature before abort_ip); rseq_cs is left
// for the kernel to clear at the resume (RIP is outside the sequence then). A death of
// probecost after it lets the thread go at its abort handler, where it was going anyway. A
// descriptor the kernel would refuse (it kills the thread with SIGSEGV) is left as it is.
#include <linux/rseq.h>
#include <sys/ptrace.h>

#include <cstddef>

#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

template <typename T>
std::optional<T> read_value(TraceeMemory& memory, RuntimeAddr at) {
  T value{};
  try {
    memory.read(at, {reinterpret_cast<std::uint8_t*>(&value), sizeof value});
  } catch (const Error&) {
    return std::nullopt;
  }
  return value;
}

// The abort address of the sequence the thread is in at `rip`, if it is in one the kernel would
// abort (tracee memory, read as the kernel reads it: nothing trusted beyond that).
std::optional<std::uint64_t> abort_of_sequence_at(TraceeMemory& memory, pid_t tid,
                                                  std::uint64_t rip) {
  __ptrace_rseq_configuration conf{};
  if (sys::ptrace_call(PTRACE_GET_RSEQ_CONFIGURATION, tid, reinterpret_cast<void*>(sizeof conf),
                       &conf) < 0 ||
      !conf.rseq_abi_pointer || conf.rseq_abi_size < 32)
    return std::nullopt;
  auto cs_at = read_value<std::uint64_t>(memory, RuntimeAddr(conf.rseq_abi_pointer + 8));
  if (!cs_at || !*cs_at) return std::nullopt;
  auto cs = read_value<struct rseq_cs>(memory, RuntimeAddr(*cs_at));
  constexpr std::uint64_t kUserTop = 0x00007ffffffff000ull;  // TASK_SIZE, 4-level paging
  if (!cs || cs->version != 0 || cs->start_ip >= kUserTop ||
      cs->post_commit_offset >= kUserTop - cs->start_ip || cs->abort_ip >= kUserTop)
    return std::nullopt;
  auto in = [&](std::uint64_t ip) { return ip - cs->start_ip < cs->post_commit_offset; };
  if (!in(rip) || in(cs->abort_ip) || cs->abort_ip < 4) return std::nullopt;
  auto sig = read_value<std::uint32_t>(memory, RuntimeAddr(cs->abort_ip - 4));
  if (!sig || *sig != conf.signature) return std::nullopt;
  return cs->abort_ip;
}

}  // namespace

bool leave_rseq_sequence(TraceeMemory& memory, Task& t) {
  // A stop whose signal the kernel holds (an int3 hit of ours) keeps its RIP: the hit's own.
  if (t.held() && t.last_stop().signal_stop()) return true;
  const user_regs_struct* r = t.regs();
  if (!r) return false;
  auto abort_ip = abort_of_sequence_at(memory, t.tid(), r->rip);
  if (!abort_ip) return true;
  return t.set_rip(RuntimeAddr(*abort_ip));
}

// A vfork() child runs on its parent's thread pointer, so on its parent's struct rseq, while
// the kernel has no registration for it (rseq_fork(): a CLONE_VM child starts unregistered): it
// reads the CPU its parent last ran on, and no sequence of its is ever aborted. Our trampolines'
// per-CPU commits (counters, call records) in it then raced with the threads on that CPU (a
// helper's trial: 5,920,059 counted of 6,000,000 calls in 1 run of 3, call records torn). With
// cpu_id -1 (RSEQ_CPU_ID_UNINITIALIZED) its trampolines take their path for a thread without
// rseq: lock inc, or the lost count. The parent is blocked in vfork() meanwhile; its value is
// put back at its next stop (VFORK_DONE), before it runs: kernels that cache the CPU number
// they last wrote would not write it again. glibc's own readers (sched_getcpu) fall back to
// the system call on -1, so the child runs as it would.
void TracedProcess::hide_rseq_cpu(Task& parent) {
  if (!rseq_trampolines_ || hidden_cpu_.count(parent.tid())) return;
  __ptrace_rseq_configuration conf{};
  if (sys::ptrace_call(PTRACE_GET_RSEQ_CONFIGURATION, parent.tid(),
                       reinterpret_cast<void*>(sizeof conf), &conf) < 0 ||
      !conf.rseq_abi_pointer || conf.rseq_abi_size < 32)
    return;
  RuntimeAddr cpu_id(conf.rseq_abi_pointer + offsetof(struct rseq, cpu_id));
  auto now = read_value<std::uint32_t>(space_.memory(), cpu_id);
  if (!now) return;
  const std::uint32_t none = RSEQ_CPU_ID_UNINITIALIZED;
  try {
    space_.memory().write(cpu_id, {reinterpret_cast<const std::uint8_t*>(&none), sizeof none});
    hidden_cpu_[parent.tid()] = {cpu_id, *now};
  } catch (const Error&) {
    // The thread's memory cannot be written: nothing hidden, nothing to put back.
  }
}

void TracedProcess::unhide_rseq_cpu(Task& parent) {
  auto it = hidden_cpu_.find(parent.tid());
  if (it == hidden_cpu_.end()) return;
  auto [at, value] = it->second;
  hidden_cpu_.erase(it);
  // Only over our -1: anything else was written since (by the kernel), and is right.
  if (read_value<std::uint32_t>(space_.memory(), at) != RSEQ_CPU_ID_UNINITIALIZED) return;
  try {
    space_.memory().write(at, {reinterpret_cast<const std::uint8_t*>(&value), sizeof value});
  } catch (const Error&) {
    // Gone, or exec'd: nothing of the old thread's left to put back.
  }
}

}  // namespace probecost
