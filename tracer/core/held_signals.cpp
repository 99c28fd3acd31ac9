#include "tracer/core/held_signals.hpp"

#include <sys/ptrace.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "tracer/os/proc_files.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

std::uint64_t bit(int sig) {
  return 1ull << (sig - 1);
}

bool standard(int sig) {
  return sig < SIGRTMIN;
}

// What the kernel keeps of a siginfo is copied out whole (copy_siginfo_to_user zeroes the
// bytes past it), so the same signal reads the same bytes each time.
bool same(const siginfo_t& a, const siginfo_t& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// A tkill of ours: SI_TKILL, sent by this process.
bool is_carrier(const siginfo_t& info) {
  return info.si_code == SI_TKILL && info.si_pid == ::getpid();
}

// In the signal-delivery-stop of `sig`, what its handler would be given. Nothing when the
// thread is gone or is in another stop than that signal's.
std::optional<siginfo_t> stop_siginfo(pid_t tid, int sig) {
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  if (sys::ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &info) < 0) return std::nullopt;
  if (info.si_signo != sig) return std::nullopt;
  return info;
}

// The signals queued for the thread itself (not its process's): /proc/TID/status SigPnd.
std::uint64_t thread_pending(pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigPnd:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  }
  return 0;
}

}  // namespace

bool requeue_allowed(const siginfo_t& info) {
  return info.si_code < 0 && info.si_code != SI_TKILL;
}

void HeldSignals::hold(int sig, bool front) {
  std::optional<siginfo_t> info = stop_siginfo(tid_, sig);
  if (info && came_back(sig, *info)) return;
  HeldSignal s{sig, info};
  if (front) {
    held_.push_front(s);
  } else {
    held_.push_back(s);
  }
}

bool HeldSignals::came_back(int sig, const siginfo_t& info) {
  bool carrier = is_carrier(info);
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (!it->in_kernel || it->signo != sig) continue;
    bool returned = false;
    if (carrier && it->carrier) {
      returned = true;  // its carrier: delivered from this stop, with its own siginfo
    } else if (!carrier && !it->carrier) {
      // A standard signal we queued again: itself, or one it was merged into (a signal of
      // that number already pending: then it is sent again, after this one).
      returned = same(*it->info, info);
    } else if (carrier || !standard(sig)) {
      continue;  // a real-time signal's carrier queues behind this one
    }
    // Otherwise a standard signal's carrier was merged into this one: sent again later.
    HeldSignal s = *it;
    s.in_kernel = s.carrier = false;
    held_.erase(it);
    held_.push_front(s);
    return returned;
  }
  return false;
}

void HeldSignals::forget_unseen() {
  std::uint64_t in_kernel = 0, behind = 0;
  for (const auto& s : held_) {
    if (!standard(s.signo)) continue;
    if (s.in_kernel) in_kernel |= bit(s.signo);
    if (!s.in_kernel && (in_kernel & bit(s.signo))) behind |= bit(s.signo);
  }
  if (!behind) return;
  // Gone from the thread's queue without a stop: taken by sigwaitinfo() or a signalfd (which
  // dequeue with no signal-delivery-stop), or the thread left its last stop without us.
  std::uint64_t pending = thread_pending(tid_);
  std::erase_if(held_, [&](const HeldSignal& s) {
    return s.in_kernel && (behind & bit(s.signo)) && !(pending & bit(s.signo));
  });
}

std::optional<HeldSignal> HeldSignals::take_head(int only) {
  std::uint64_t in_kernel = 0;
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (it->in_kernel) {
      in_kernel |= bit(it->signo);
    } else if (!(in_kernel & bit(it->signo)) && (only == 0 || it->signo == only)) {
      HeldSignal s = *it;
      held_.erase(it);
      return s;
    }
  }
  return std::nullopt;
}

void HeldSignals::send_back(bool traced) {
  // Standard signal numbers with one in the kernel's queue on our account: another one sent
  // now would be merged into it, and lost.
  std::uint64_t busy = 0;
  for (const auto& s : held_) {
    if (s.in_kernel && standard(s.signo)) busy |= bit(s.signo);
  }
  std::deque<HeldSignal> kept;
  for (auto& s : held_) {
    if (s.in_kernel) {
      if (traced) kept.push_back(s);
      continue;
    }
    if (traced && standard(s.signo) && (busy & bit(s.signo))) {
      kept.push_back(s);  // after that one came back
      continue;
    }
    if (standard(s.signo)) busy |= bit(s.signo);
    if (send(s, traced)) kept.push_back(s);
  }
  held_ = std::move(kept);
}

bool HeldSignals::send(HeldSignal& s, bool traced) {
  if (s.info && requeue_allowed(*s.info)) {
    siginfo_t copy = *s.info;
    if (sys::tgsigqueueinfo(tgid(), tid_, s.signo, &copy) == 0) {
      // A real-time one is queued as many times as sent: nothing more to watch.
      s.in_kernel = traced && standard(s.signo);
      return s.in_kernel;
    }
    // EAGAIN (the limit of queued signals) or ESRCH: a tkill all the same.
  }
  sys::tkill(tid_, s.signo);
  // Traced, its stop will be told by its siginfo and given the signal's own. Let go, the tkill
  // is the signal, with the siginfo of a tkill from us (no other way from outside).
  s.in_kernel = s.carrier = traced && s.info;
  return s.in_kernel;
}

pid_t HeldSignals::tgid() {
  if (tgid_ == 0) tgid_ = tgid_of(tid_);
  return tgid_;
}

}  // namespace probecost
