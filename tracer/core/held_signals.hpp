#pragma once
// HeldSignals: the signals a traced thread received while we held it (single-stepped over a
// site, in an injected call, stopped with the others), each kept with its siginfo until it
// can be delivered. A program that reads siginfo (a SIGCHLD handler, sigqueue() values, POSIX
// timers, sigwaitinfo) must see the same signal traced and untraced (issue 25).
//
// The kernel lets a tracer deliver a signal only from a signal-delivery-stop, as the resume's
// data, with the siginfo set by PTRACE_SETSIGINFO (else it makes one up: SI_USER from the
// tracer). The head goes so. The others go back to the kernel's queue: rt_tgsigqueueinfo
// with their own siginfo where the kernel allows it from another process (si_code < 0 and not
// SI_TKILL: sigqueue, timers, message queues); the others (kill's SI_USER, tkill's SI_TKILL,
// SIGCHLD's CLD_*, the kernel's own) are sent as a bare tkill, a "carrier" whose stop is known
// by its siginfo (SI_TKILL from us) and given back the signal's own siginfo before it is
// delivered from that stop. A standard signal (below SIGRTMIN) is not queued twice: a second
// one sent while the first is pending is lost, so at most one per number is in the kernel's
// queue on our account, the next waiting here until that one came back.
//
// If probecost dies, what is in the kernel's queue is delivered without us: a carrier with
// the siginfo of a tkill from probecost, as before; nothing else is left of ours.
#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <deque>
#include <optional>

namespace probecost {

struct HeldSignal {
  int signo;
  std::optional<siginfo_t> info;  // nothing if it could not be read (the thread was gone)
  // Sent back to the kernel and not seen since: a carrier, or a standard signal re-queued.
  bool in_kernel = false;
  bool carrier = false;
};

class HeldSignals {
 public:
  explicit HeldSignals(pid_t tid) : tid_(tid) {}

  // The thread is in `sig`'s signal-delivery-stop (reported, not resumed): the signal is kept,
  // with its siginfo (PTRACE_GETSIGINFO), to be delivered at a later resume. A carrier's stop
  // or a re-queued signal coming back takes the place of its entry.
  void push_back(int sig) { hold(sig, false); }
  void push_front(int sig) { hold(sig, true); }
  bool empty() const { return held_.empty(); }
  std::size_t size() const { return held_.size(); }

  // In a stop, before a resume: forgets a standard signal sent back and taken since without a
  // stop (sigwaitinfo, signalfd), when another of its number waits behind it. Reads
  // /proc/TID/status then only.
  void forget_unseen();
  // The signal to deliver from the current signal-delivery-stop, taken out: the first not in
  // the kernel's queue, unless an earlier one of its number is (order kept per number); of
  // number `only` when not 0.
  std::optional<HeldSignal> take_head(int only = 0);
  // After the resume: the others back to the kernel's queue, as the header says. `traced`:
  // we will see their stops again (a detach sends everything, with what siginfo it can).
  void send_back(bool traced);

 private:
  void hold(int sig, bool front);
  // A stop of `sig` that brings back an entry in the kernel's queue: true when it is that
  // entry (put first, to be delivered from this stop), false when it is another signal.
  bool came_back(int sig, const siginfo_t& info);
  // Sends one back; true when it stays here, watched in the kernel's queue.
  bool send(HeldSignal& s, bool traced);
  pid_t tgid();

  pid_t tid_;
  pid_t tgid_ = 0;  // read once, when first needed
  std::deque<HeldSignal> held_;
};

// Whether rt_tgsigqueueinfo from another process may send this siginfo as it is.
bool requeue_allowed(const siginfo_t& info);

}  // namespace probecost
