#include "tracer/os/seccomp.hpp"

#include <linux/seccomp.h>
#include <sys/syscall.h>

#include <cstring>
#include <filesystem>

#include "common/error.hpp"
#include "tracer/os/proc_files.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost::seccomp {

namespace {

// The order the kernel picks by: ACTION_ONLY() as a signed number, the lowest wins.
std::int32_t rank(std::uint32_t value) {
  return static_cast<std::int32_t>(value & SECCOMP_RET_ACTION_FULL);
}

// Seccomp: of /proc/TID/status (-1: the thread is gone).
int status_mode(pid_t tid) {
  return static_cast<int>(status_number(proc_text(tid, "status"), "Seccomp:"));
}

// Filter `index` of `tid` (0: the newest), or nothing at the end of the stack. Error with the
// kernel's reason when it will not give it.
std::optional<Program> read_filter(pid_t tid, unsigned long index) {
  void* at = reinterpret_cast<void*>(index);
  long n = sys::ptrace_call(PTRACE_SECCOMP_GET_FILTER, tid, at);
  if (n < 0 && errno == ENOENT) return std::nullopt;
  if (n <= 0) throw Error::from_errno("PTRACE_SECCOMP_GET_FILTER");
  Program p(static_cast<std::size_t>(n));
  n = sys::ptrace_call(PTRACE_SECCOMP_GET_FILTER, tid, at, p.data());
  if (n < 0) throw Error::from_errno("PTRACE_SECCOMP_GET_FILTER");
  p.resize(static_cast<std::size_t>(n));
  return p;
}

}  // namespace

const char* action_name(Action a) {
  return kActionNames.name(a);
}

std::string Verdict::describe() const {
  std::string s = action_name(action);
  switch (action) {
    case Action::KillProcess:
    case Action::KillThread:
      return s + " (it would die of SIGSYS)";
    case Action::Trap:
      return s + " (a SIGSYS it did not ask for)";
    case Action::Errno: {
      if (data == 0) return s + " (0: a success it fakes)";
      const char* name = strerrorname_np(data);
      return s + " (" + (name ? name : "errno " + std::to_string(data)) + ": " +
             std::strerror(data) + ")";
    }
    case Action::Trace:
      return s + " (ENOSYS, or a PTRACE_EVENT_SECCOMP stop)";
    case Action::UserNotif:
      return s + " (a supervisor process decides)";
    default:
      return s;
  }
}

Verdict evaluate(std::span<const Program> filters, const CallData& call) {
  std::uint32_t value = SECCOMP_RET_ALLOW;
  for (const Program& p : filters) {  // newest first, as the kernel; a tie keeps the first
    std::uint32_t v = run(p, call);
    if (rank(v) < rank(value)) value = v;
  }
  return Verdict{action_of(value), static_cast<std::uint16_t>(value & SECCOMP_RET_DATA)};
}

bool any_thread_under_seccomp(pid_t pid) {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") == std::string::npos &&
        status_mode(static_cast<pid_t>(std::stol(name))) > 0)
      return true;
  }
  return false;
}

ThreadFilters ThreadFilters::of(pid_t tid) {
  ThreadFilters t;
  int mode = status_mode(tid);
  if (mode < 0) throw Error("thread " + std::to_string(tid) + " is gone");
  if (mode == SECCOMP_MODE_STRICT) t.mode_ = Mode::Strict;
  if (mode != SECCOMP_MODE_FILTER) return t;
  t.mode_ = Mode::Filter;
  try {
    for (unsigned long i = 0;; ++i) {
      auto p = read_filter(tid, i);
      if (!p) break;
      t.filters_.push_back(std::move(*p));
    }
  } catch (const Error& e) {
    t.filters_.clear();
    t.unreadable_ = std::string("its seccomp filter cannot be read (") + e.what() + ")";
  }
  return t;
}

ThreadFilters ThreadFilters::with(std::vector<Program> filters) {
  ThreadFilters t;
  t.mode_ = Mode::Filter;
  t.filters_ = std::move(filters);
  return t;
}

ThreadFilters::Fate ThreadFilters::fate(const CallData& call) const {
  using Kind = Fate::Kind;
  std::string what = call_name(call.nr);
  switch (mode_) {
    case Mode::Disabled:
      return {};
    case Mode::Strict:
      // SECCOMP_MODE_STRICT: read, write, _exit and rt_sigreturn only; anything else SIGKILL.
      if (call.nr == SYS_read || call.nr == SYS_write || call.nr == SYS_exit ||
          call.nr == SYS_rt_sigreturn)
        return {};
      return {Kind::Harms, 0, "seccomp strict mode would kill it for " + what};
    case Mode::Filter:
      break;
  }
  if (!unreadable_.empty()) return {Kind::Harms, 0, unreadable_ + ": " + what + " might kill it"};
  Verdict v = evaluate(filters_, call);
  if (v.runs()) return {};
  std::string why = "its seccomp filter answers " + what + " with " + v.describe();
  if (v.action == Action::Errno && v.data != 0) return {Kind::Answers, -long{v.data}, why};
  // Without PTRACE_O_TRACESECCOMP (we never set it) the kernel fails the call with ENOSYS.
  if (v.action == Action::Trace) return {Kind::Answers, -ENOSYS, why};
  return {Kind::Harms, 0, why};
}

std::string call_name(long nr) {
  switch (nr) {
    case SYS_close:
      return "close";
    case SYS_mmap:
      return "mmap";
    case SYS_mprotect:
      return "mprotect";
    case SYS_munmap:
      return "munmap";
    case SYS_rt_sigaction:
      return "rt_sigaction";
    case SYS_rt_sigprocmask:
      return "rt_sigprocmask";
    case SYS_rt_sigreturn:
      return "rt_sigreturn";
    case SYS_getpid:
      return "getpid";
    case SYS_ftruncate:
      return "ftruncate";
    case SYS_gettid:
      return "gettid";
    case SYS_rt_tgsigqueueinfo:
      return "rt_tgsigqueueinfo";
    case SYS_memfd_create:
      return "memfd_create";
  }
  return "system call " + std::to_string(nr);
}

}  // namespace probecost::seccomp
