#pragma once
// The tracee's seccomp filters, and what they would do to a system call we make it run.
//
// A filter applies to every system call a thread makes, ours included: an mmap or memfd_create
// injected to map a scratch page, the rt_sigaction that installs our SIGTRAP handler, a call
// an IFUNC resolver makes. A filter that kills on one of them would kill the process for us.
// So before injecting a call, probecost runs the thread's filters on it, as the kernel would
// (classic BPF on struct seccomp_data), and does not inject what they would not allow.
//
// Filters are per thread: a thread has the stack of filters installed by itself and by the
// threads it descends from (or synchronised onto it with SECCOMP_FILTER_FLAG_TSYNC). The
// kernel runs every filter of the stack and keeps the most restrictive action (lowest
// ACTION_ONLY value as a signed 32-bit number: seccomp_run_filters in kernel/seccomp.c).
#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/names.hpp"

namespace probecost::seccomp {

// struct seccomp_data: what a filter sees of a system call.
struct CallData {
  std::int32_t nr = 0;
  std::uint32_t arch = 0;  // AUDIT_ARCH_X86_64 for the syscall instruction of a 64-bit process
  // The address after the syscall instruction (the kernel's regs->ip at system call entry).
  std::uint64_t instruction_pointer = 0;
  std::uint64_t args[6] = {};
};
static_assert(sizeof(CallData) == 64);

// A 64-bit system call `nr` made by the syscall instruction at `syscall_at` (2 bytes).
CallData x86_64_call(long nr, std::span<const long> args, std::uint64_t syscall_at);

using Program = std::vector<sock_filter>;

// Runs one filter as the kernel does and returns its 32-bit value. Error if the program is not
// one the kernel accepts (seccomp_check_filter): an instruction seccomp forbids, a load outside
// seccomp_data or unaligned, a jump out of the program, a path that ends without a return.
std::uint32_t run(const Program& program, const CallData& call);

// Actions, most restrictive first: the kernel's order.
enum class Action { KillProcess, KillThread, Trap, Errno, UserNotif, Trace, Log, Allow };
// The action of a filter's value; an action the kernel does not know is KillProcess (its
// __seccomp_filter treats it so).
Action action_of(std::uint32_t value);
inline constexpr auto kActionNames = name_table<Action>({
    {Action::KillProcess, "SECCOMP_RET_KILL_PROCESS"},
    {Action::KillThread, "SECCOMP_RET_KILL_THREAD"},
    {Action::Trap, "SECCOMP_RET_TRAP"},
    {Action::Errno, "SECCOMP_RET_ERRNO"},
    {Action::UserNotif, "SECCOMP_RET_USER_NOTIF"},
    {Action::Trace, "SECCOMP_RET_TRACE"},
    {Action::Log, "SECCOMP_RET_LOG"},
    {Action::Allow, "SECCOMP_RET_ALLOW"},
});
const char* action_name(Action a);  // "SECCOMP_RET_KILL_PROCESS", ... (kActionNames)

struct Verdict {
  Action action = Action::Allow;
  std::uint16_t data = 0;  // errno for Errno, the value for Trap, Trace
  // Allow and Log run the call. Everything else must not be injected: a kill or a SIGSYS
  // harms the process, Errno and Trace (ENOSYS, or a PTRACE_EVENT_SECCOMP stop we do not
  // expect) do not run it, UserNotif leaves it to a supervisor we cannot predict.
  bool runs() const { return action == Action::Allow || action == Action::Log; }
  // "SECCOMP_RET_ERRNO (EPERM)", "SECCOMP_RET_KILL_PROCESS", ...
  std::string describe() const;
};

// The most restrictive result of `filters` (the kernel runs them all) on `call`.
Verdict evaluate(std::span<const Program> filters, const CallData& call);

// Whether any thread of `pid` runs under seccomp (strict or filter mode, from /proc): code we
// place in the process must then make no system call of its own (a filter may kill on it).
bool any_thread_under_seccomp(pid_t pid);

// A thread's seccomp state: Seccomp: in /proc/TID/status, and its filters.
class ThreadFilters {
 public:
  enum class Mode { Disabled, Strict, Filter };

  // Reads the state of `tid`, which must be in a ptrace-stop of ours (PTRACE_SECCOMP_GET_FILTER
  // requires it). In filter mode the filters are read; when the kernel refuses to give them
  // (it needs CAP_SYS_ADMIN in the tracer, and a tracer not under seccomp itself), or the
  // filter has no classic program saved, unreadable() says why, and every call is refused.
  // Error when the thread is gone.
  static ThreadFilters of(pid_t tid);
  // For tests: a thread with these filters.
  static ThreadFilters with(std::vector<Program> filters);

  Mode mode() const { return mode_; }
  std::size_t count() const { return filters_.size(); }
  const std::string& unreadable() const { return unreadable_; }

  // What making `call` in this thread comes to (its fate: run, answered, or harmful).
  struct Fate {
    enum class Kind {
      Runs,     // allowed (or logged): inject it
      Answers,  // not run, and harmless: the filter's errno, or ENOSYS for SECCOMP_RET_TRACE
                // with no PTRACE_O_TRACESECCOMP; `result` is what the call returns
      Harms,    // must not be injected: a kill, a SIGSYS, a supervisor's say, a faked
                // success (SECCOMP_RET_ERRNO with 0), or a filter we cannot read
    };
    Kind kind = Kind::Runs;
    long result = 0;
    std::string why;  // the filter's verdict, said (empty for Runs)
  };
  Fate fate(const CallData& call) const;

 private:
  Mode mode_ = Mode::Disabled;
  std::vector<Program> filters_;
  std::string unreadable_;
};

// "mmap", "memfd_create", ... for a 64-bit system call number (or "system call N").
std::string call_name(long nr);

// A system call probecost would have made the tracee run, and did not: the thread's seccomp
// filter would have harmed the process for it (ThreadFilters::Fate::Kind::Harms).
class Refused : public Error {
 public:
  explicit Refused(const std::string& what) : Error(what) {}
};

}  // namespace probecost::seccomp
