#include "tracer/os/syscalls.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "tracer/os/fault_plan.hpp"

namespace probecost::sys {

namespace {

// PROBECOST_PTRACE_LOG=FILE: every ptrace request, wait result and signal sent, one line each,
// for reconstructing a race after the fact (strace of the tracer changes its timing far more).
std::FILE* log_file() {
  static std::FILE* f = [] {
    const char* path = std::getenv("PROBECOST_PTRACE_LOG");
    std::FILE* out = path && *path ? std::fopen(path, "w") : nullptr;
    if (out) std::setvbuf(out, nullptr, _IOLBF, 0);
    return out;
  }();
  return f;
}

double log_time() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}

long ptrace_call(enum __ptrace_request request, pid_t tid, void* addr, void* data) {
  fault_plan::before_call();
  ++counters().ptrace;
  long r = ::ptrace(request, tid, addr, data);
  if (std::FILE* f = log_file()) {
    int e = errno;
    std::fprintf(f, "%.6f ptrace %d tid %d addr %p data %p -> %ld%s\n", log_time(),
                 static_cast<int>(request), tid, addr, data, r,
                 r == -1 && e ? (e == ESRCH ? " ESRCH" : " error") : "");
    errno = e;
  }
  return r;
}

pid_t wait_for(pid_t tid, int* status, int options, bool interruptible) {
  for (;;) {
    fault_plan::before_call();
    ++counters().wait;
    pid_t r = ::waitpid(tid, status, options);
    if (std::FILE* f = log_file(); f && r > 0)
      std::fprintf(f, "%.6f wait -> %d status %#x\n", log_time(), r, *status);
    if (r >= 0 || errno != EINTR || interruptible) return r;
  }
}

pid_t peek_any(siginfo_t* info, bool interruptible) {
  for (;;) {
    fault_plan::before_call();
    ++counters().wait;
    *info = siginfo_t{};
    int r = ::waitid(P_ALL, 0, info, __WALL | WEXITED | WSTOPPED | WNOWAIT);
    if (r == 0 && info->si_pid != 0) {
      if (std::FILE* f = log_file())
        std::fprintf(f, "%.6f peek -> %d code %d status %#x\n", log_time(), info->si_pid,
                     info->si_code, info->si_status);
      return info->si_pid;
    }
    if (r == 0) errno = ECHILD;  // not possible without WNOHANG; a nothing, not an event
    if (errno != EINTR || interruptible) return -1;
  }
}

int tgkill(pid_t tgid, pid_t tid, int sig) {
  fault_plan::before_call();
  ++counters().other;
  if (std::FILE* f = log_file())
    std::fprintf(f, "%.6f tgkill %d %d sig %d\n", log_time(), tgid, tid, sig);
  return static_cast<int>(::syscall(SYS_tgkill, tgid, tid, sig));
}

int kill(pid_t pid, int sig) {
  fault_plan::before_call();
  ++counters().other;
  if (std::FILE* f = log_file()) std::fprintf(f, "%.6f kill %d sig %d\n", log_time(), pid, sig);
  return ::kill(pid, sig);
}

int tkill(pid_t tid, int sig) {
  fault_plan::before_call();
  ++counters().other;
  if (std::FILE* f = log_file()) std::fprintf(f, "%.6f tkill %d sig %d\n", log_time(), tid, sig);
  return static_cast<int>(::syscall(SYS_tkill, tid, sig));
}

int tgsigqueueinfo(pid_t tgid, pid_t tid, int sig, siginfo_t* info) {
  fault_plan::before_call();
  ++counters().other;
  if (std::FILE* f = log_file())
    std::fprintf(f, "%.6f rt_tgsigqueueinfo %d %d sig %d code %d\n", log_time(), tgid, tid, sig,
                 info->si_code);
  return static_cast<int>(::syscall(SYS_rt_tgsigqueueinfo, tgid, tid, sig, info));
}

ssize_t vm_read(pid_t tid, void* out, std::size_t size, std::uint64_t from, std::size_t pieces) {
  fault_plan::before_call();
  ++counters().memory;
  iovec local{out, size};
  std::vector<iovec> remote(pieces);
  for (std::size_t i = 0; i < pieces; ++i)
    remote[i] = {reinterpret_cast<void*>(from + i * (size / pieces)), size / pieces};
  return ::process_vm_readv(tid, &local, 1, remote.data(), pieces, 0);
}

ssize_t vm_write(pid_t tid, const void* in, std::size_t size, std::uint64_t to) {
  fault_plan::before_call();
  ++counters().memory;
  iovec local{const_cast<void*>(in), size};
  iovec remote{reinterpret_cast<void*>(to), size};
  return ::process_vm_writev(tid, &local, 1, &remote, 1, 0);
}

}  // namespace probecost::sys
