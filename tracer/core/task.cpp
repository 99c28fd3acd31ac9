#include "tracer/core/task.hpp"

#include <signal.h>
#include <sys/syscall.h>

#include <cstddef>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

void* rip_offset() {
  return reinterpret_cast<void*>(offsetof(struct user, regs.rip));
}

std::string proc_path(pid_t tid, const char* file) {
  return "/proc/" + std::to_string(tid) + "/" + file;
}

}  // namespace

bool Task::ptrace_if_alive(__ptrace_request request, void* addr, void* data) {
  if (sys::ptrace_call(request, tid_, addr, data) >= 0) return true;
  if (errno == ESRCH) return false;
  throw Error::from_errno("ptrace request " + std::to_string(request) + " on thread " +
                          std::to_string(tid_));
}

void Task::invalidate_registers() {
  have_regs_ = have_rip_ = false;
}

void Task::note_stop(WaitStatus ws) {
  last_stop_ = ws;
  state_ = State::Stopped;
  held_ = false;
  invalidate_registers();
}

void Task::leave_stop(State next) {
  ++resumes_;  // before the resume itself: nothing read from now on is taken for a stopped one's
  invalidate_registers();
  state_ = next;
  held_ = false;  // a resumed thread's stop is no longer reportable
  stepping_ = false;
}

std::optional<RuntimeAddr> Task::rip() {
  if (!have_rip_ && !have_regs_) {
    errno = 0;
    long r = sys::ptrace_call(PTRACE_PEEKUSER, tid_, rip_offset(), nullptr);
    if (r == -1 && errno) {
      if (errno == ESRCH) return std::nullopt;
      throw Error::from_errno("reading RIP of thread " + std::to_string(tid_));
    }
    regs_.rip = static_cast<unsigned long long>(r);
    have_rip_ = true;
  }
  return RuntimeAddr(regs_.rip);
}

bool Task::set_rip(RuntimeAddr pc) {
  // POKEUSER of one word instead of SETREGS: the same one system call, and nothing else of
  // the register file is written back by accident.
  if (!ptrace_if_alive(PTRACE_POKEUSER, rip_offset(), reinterpret_cast<void*>(pc.value())))
    return false;
  regs_.rip = pc.value();
  have_rip_ = true;
  return true;
}

const user_regs_struct* Task::regs() {
  if (!have_regs_) {
    if (!ptrace_if_alive(PTRACE_GETREGS, nullptr, &regs_)) return nullptr;
    have_regs_ = have_rip_ = true;
  }
  return &regs_;
}

bool Task::set_regs(const user_regs_struct& regs) {
  if (!ptrace_if_alive(PTRACE_SETREGS, nullptr, const_cast<user_regs_struct*>(&regs))) return false;
  regs_ = regs;
  have_regs_ = have_rip_ = true;
  return true;
}

bool Task::resume_with_signals(__ptrace_request request) {
  long sig = 0;
  if (!pending_signals.empty()) pending_signals.forget_unseen();
  if (!pending_signals.empty() && last_stop_.signal_stop()) {
    // A stop only peeked at (held) keeps its signal in the kernel: a tracer that dies before
    // the resume lets the thread go with it, and with the siginfo last set. Another signal's
    // siginfo would turn our hit's SIGTRAP into one the kernel calls SI_USER (si_signo differs,
    // ptrace_signal()), and the trap handler would pass it on to the program. So from a held
    // stop only a signal of its own number is delivered; the others go back to the queue.
    if (auto head = pending_signals.take_head(held_ ? last_stop_.stop_signal() : 0)) {
      // A resume's signal other than the stop's own is given a siginfo the kernel makes up
      // (SI_USER from the tracer, ptrace_signal()) unless PTRACE_SETSIGINFO said otherwise.
      if (head->info) set_siginfo(*head->info);
      sig = head->signo;
    }
  }
  leave_stop(State::Running);
  if (!ptrace_if_alive(request, nullptr, reinterpret_cast<void*>(sig))) return false;
  // The rest go back to the kernel's queue: each is reported as a stop again, and delivered.
  if (!pending_signals.empty()) pending_signals.send_back(request != PTRACE_DETACH);
  return true;
}

bool Task::resume() {
  return resume_with_signals(handlers_watched > 0 ? PTRACE_SYSCALL : PTRACE_CONT);
}

bool Task::detach() {
  return resume_with_signals(PTRACE_DETACH);
}

bool Task::set_options(long options) {
  return ptrace_if_alive(PTRACE_SETOPTIONS, nullptr, reinterpret_cast<void*>(options));
}

bool Task::resume_if_settled() {
  if (!stopped() || deferred || !runs_with_us()) return false;
  return resume();
}

bool Task::resume_keeping_signals() {
  leave_stop(State::Running);
  return ptrace_if_alive(PTRACE_CONT);
}

bool Task::resume_to_syscall_exit() {
  leave_stop(State::Running);
  return ptrace_if_alive(PTRACE_SYSCALL);
}

bool Task::interrupt() {
  return ptrace_if_alive(PTRACE_INTERRUPT);
}

std::optional<unsigned long> Task::event_message() {
  unsigned long msg = 0;
  if (!ptrace_if_alive(PTRACE_GETEVENTMSG, nullptr, &msg)) return std::nullopt;
  return msg;
}

std::optional<TrapCause> Task::trap_cause() {
  siginfo_t info;
  if (!ptrace_if_alive(PTRACE_GETSIGINFO, nullptr, &info)) return std::nullopt;
  return classify_trap(info);
}

std::optional<std::uint64_t> Task::blocked_signals() {
  std::uint64_t mask = 0;
  if (!ptrace_if_alive(PTRACE_GETSIGMASK, reinterpret_cast<void*>(sizeof mask), &mask))
    return std::nullopt;
  return mask;
}

bool Task::set_blocked_signals(std::uint64_t mask) {
  return ptrace_if_alive(PTRACE_SETSIGMASK, reinterpret_cast<void*>(sizeof mask), &mask);
}

std::optional<siginfo_t> Task::siginfo() {
  siginfo_t info;
  if (!ptrace_if_alive(PTRACE_GETSIGINFO, nullptr, &info)) return std::nullopt;
  return info;
}

bool Task::set_siginfo(const siginfo_t& info) {
  siginfo_t copy = info;
  return ptrace_if_alive(PTRACE_SETSIGINFO, nullptr, &copy);
}

std::optional<__ptrace_syscall_info> Task::syscall_info() {
  __ptrace_syscall_info info{};
  // addr is the size of the buffer; the kernel fills at most that much.
  if (!ptrace_if_alive(PTRACE_GET_SYSCALL_INFO, reinterpret_cast<void*>(sizeof info), &info))
    return std::nullopt;
  return info;
}

bool Task::resume_listening() {
  leave_stop(State::Listening);
  return ptrace_if_alive(PTRACE_LISTEN);
}

bool Task::single_step() {
  leave_stop(State::Running);
  stepping_ = true;
  return ptrace_if_alive(PTRACE_SINGLESTEP);
}

bool sigtrap_pending(pid_t tid) {
  std::ifstream in(proc_path(tid, "status"));
  std::uint64_t pending = 0, blocked = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigPnd:", 0) == 0) pending = std::stoull(line.substr(7), nullptr, 16);
    if (line.rfind("SigBlk:", 0) == 0) blocked = std::stoull(line.substr(7), nullptr, 16);
  }
  // An int3's SIGTRAP is queued for the thread itself (SigPnd, not the process's ShdPnd), and
  // the kernel unblocks SIGTRAP to force it (force_sig_info_to_task): a blocked one is not ours.
  std::uint64_t bit = 1ull << (SIGTRAP - 1);
  return (pending & bit) && !(blocked & bit);
}

char task_state_letter(pid_t tid) {
  std::string state = stat_field(tid, 3);
  return state.empty() ? 0 : state[0];
}

bool blocked_in_vfork(pid_t tid) {
  // Waiting for a vfork child is an uninterruptible (killable) sleep: 'D'. A thread stopped by
  // ptrace is 't', even one whose registers still name clone (a new thread at its first stop).
  if (task_state_letter(tid) != 'D') return false;
  // /proc/TID/syscall: "NR ARG1 ..." while blocked in a system call, "running" otherwise.
  std::ifstream in(proc_path(tid, "syscall"));
  std::string nr, arg;
  if (!(in >> nr >> arg)) return false;
  constexpr std::uint64_t kCloneVfork = 0x4000;
  if (nr == std::to_string(SYS_vfork)) return true;
  if (nr == std::to_string(SYS_clone)) return std::stoull(arg, nullptr, 16) & kCloneVfork;
  if (nr != std::to_string(SYS_clone3)) return false;
  // clone3's flags are the first field of the struct clone_args its first argument points to.
  std::uint64_t flags = 0;
  std::ifstream mem(proc_path(tid, "mem"), std::ios::binary);
  mem.seekg(static_cast<std::streamoff>(std::stoull(arg, nullptr, 16)));
  if (!mem.read(reinterpret_cast<char*>(&flags), sizeof flags)) return false;
  return flags & kCloneVfork;
}

}  // namespace probecost
