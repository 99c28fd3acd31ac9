#pragma once
// Every ptrace request, wait and signal the tracer makes on a tracee goes through these
// wrappers (and every access to its memory through ProcMemory, which counts itself), so that
// the count per hit is a measured figure, not a guess. Children that are no tracee (an
// untraced run's child, the guardian's middle process: tracer/int3/guardian.cpp) wait with
// plain waitpid.
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace probecost::sys {

struct Counters {
  std::uint64_t ptrace = 0;
  std::uint64_t wait = 0;
  std::uint64_t memory = 0;  // pread/pwrite on /proc/PID/mem
  std::uint64_t other = 0;   // tgkill, ...
  std::uint64_t total() const { return ptrace + wait + memory + other; }
};

Counters& counters();

long ptrace_call(enum __ptrace_request request, pid_t tid, void* addr = nullptr,
                 void* data = nullptr);
// Wraps waitpid. Retries on EINTR (probecost's timer and stop signals have no SA_RESTART)
// unless `interruptible`: the event loop wants EINTR back to notice a tick or a stop request.
pid_t wait_for(pid_t tid, int* status, int options, bool interruptible = false);
// waitid(P_ALL, __WALL | WEXITED | WSTOPPED | WNOWAIT): the next event of any child or
// tracee, left reportable (a ptrace-stop keeps its signal in the kernel; see Family). The
// reporting task's tid, or -1 with errno (EINTR only when `interruptible`, as wait_for).
pid_t peek_any(siginfo_t* info, bool interruptible);
int tgkill(pid_t tgid, pid_t tid, int sig);
// kill: a signal to a whole process (SIGKILL, SIGCONT), or 0 to ask whether it exists.
int kill(pid_t pid, int sig);
// tkill: a signal to one thread by its tid alone (re-sending a signal the thread received).
int tkill(pid_t tid, int sig);
// rt_tgsigqueueinfo: a signal with the siginfo given, to one thread. From another process the
// kernel takes only si_code < 0 other than SI_TKILL (sigqueue, timers...): EPERM otherwise.
int tgsigqueueinfo(pid_t tgid, pid_t tid, int sig, siginfo_t* info);
// process_vm_readv of `size` bytes at `from` in thread `tid`'s memory, as `pieces` equal remote
// pieces (so that a read stopped by an unmapped piece still gives those before it): the bytes
// read, or -1 with errno.
ssize_t vm_read(pid_t tid, void* out, std::size_t size, std::uint64_t from, std::size_t pieces);
// process_vm_writev of `size` bytes to `to`: unlike a write through /proc/PID/mem (FOLL_FORCE),
// it fails where the thread itself could not write (a guard page, a read-only mapping).
ssize_t vm_write(pid_t tid, const void* in, std::size_t size, std::uint64_t to);

}  // namespace probecost::sys
