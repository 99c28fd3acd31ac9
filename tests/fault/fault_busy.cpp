// A busy process for attach/detach cycles, signals, SIGSTOP and SIGKILL of the tracer.
//   fault_busy [--threads N] [--churn] [--idle] [--calls N] [--ctl-fd FD] [--seed S]
//   default   N threads (2) call probe_fn without pause until "stop" (or EOF) on stdin; the
//             end line adds loops=TOTAL, the calls the loops made (calls= is probe_fn's count)
//   --churn   threads are created and end all the time: batches of 3, each thread making
//             1..200 calls, until "stop"
//   --idle    N threads wait; "go K" makes each call probe_fn K times -> "done calls=TOTAL"
//   --calls K each of N threads calls probe_fn K times, then the program ends by itself
//   --rate R  the N threads call probe_fn R times a second in all (paced on CLOCK_MONOTONIC
//             deadlines), until "stop"
//   --seccomp CALL:ACTION  with --idle: a seccomp filter, loaded on every thread once they run
//             (SECCOMP_FILTER_FLAG_TSYNC), that answers CALL (memfd_create; mmap-exec: mmap or
//             mprotect with PROT_EXEC; mmap-fixed: mmap with MAP_FIXED_NOREPLACE, which every
//             mmap probecost injects has and the program's own do not; rt_sigaction: setting
//             SIGTRAP's disposition, which the program does before, reading it stays allowed;
//             futex-shared: FUTEX_WAIT or FUTEX_WAKE without the private flag)
//             with ACTION (kill, trap, eperm, enosys); every other call allowed
#include <linux/futex.h>
#include <seccomp.h>
#include <sys/mman.h>

#include <condition_variable>
#include <ctime>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "target_common.hpp"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<std::uint64_t> g_loops{0};  // calls the hammering threads made

void hammer() {
  std::uint64_t i = 0;
  for (; !g_stop.load(std::memory_order_relaxed); ++i) fault::call_probe(i);
  g_loops += i;
}

// R calls a second in all from `threads` threads: each its share, on absolute deadlines (a
// late call is not made up for by a burst).
void paced(double rate, unsigned threads) {
  const auto period = static_cast<long long>(1e9 * threads / rate);
  timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (std::uint64_t i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    fault::call_probe(i);
    long long ns = next.tv_nsec + period;
    next.tv_sec += ns / 1000000000;
    next.tv_nsec = ns % 1000000000;
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
  }
}

void churn() {
  while (!g_stop.load()) {
    std::vector<std::thread> batch;
    for (int t = 0; t < 3; ++t) {
      std::uint64_t calls = 1 + fault::random_below(200);
      batch.emplace_back([calls] {
        for (std::uint64_t i = 0; i < calls; ++i) fault::call_probe(i);
      });
    }
    for (auto& t : batch) t.join();
  }
}

// --idle: "go K" rounds, each thread K calls, answered once all are done.
class Rounds {
 public:
  explicit Rounds(unsigned threads) {
    for (unsigned t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~Rounds() {
    {
      std::lock_guard<std::mutex> lock(m_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void go(std::uint64_t calls) {
    std::unique_lock<std::mutex> lock(m_);
    calls_ = calls;
    pending_ = workers_.size();
    ++round_;
    cv_.notify_all();
    done_cv_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return quit_ || round_ != seen; });
      if (quit_) return;
      seen = round_;
      std::uint64_t n = calls_;
      lock.unlock();
      for (std::uint64_t i = 0; i < n; ++i) fault::call_probe(i);
      lock.lock();
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  std::uint64_t calls_ = 0, round_ = 0;
  std::size_t pending_ = 0;
  bool quit_ = false;
};

// --seccomp CALL:ACTION (see the top); exits 2 on a bad spec.
void load_seccomp(const std::string& spec) {
  auto colon = spec.find(':');
  std::string call = spec.substr(0, colon),
              action = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::uint32_t act = action == "kill"     ? SCMP_ACT_KILL_PROCESS
                      : action == "trap"   ? SCMP_ACT_TRAP
                      : action == "eperm"  ? SCMP_ACT_ERRNO(EPERM)
                      : action == "enosys" ? SCMP_ACT_ERRNO(ENOSYS)
                                           : 0;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
  int rc = -1;
  if (act && call == "mmap-exec") {
    rc = seccomp_rule_add(ctx, act, SCMP_SYS(mmap), 1,
                          SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
    rc |= seccomp_rule_add(ctx, act, SCMP_SYS(mprotect), 1,
                           SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
  } else if (act && call == "mmap-fixed") {
    rc = seccomp_rule_add(ctx, act, SCMP_SYS(mmap), 1,
                          SCMP_A3(SCMP_CMP_MASKED_EQ, MAP_FIXED_NOREPLACE, MAP_FIXED_NOREPLACE));
  } else if (act && call == "rt_sigaction") {
    rc = seccomp_rule_add(ctx, act, SCMP_SYS(rt_sigaction), 2, SCMP_A0(SCMP_CMP_EQ, SIGTRAP),
                          SCMP_A1(SCMP_CMP_NE, 0));
  } else if (act && call == "futex-shared") {
    // FUTEX_WAIT and FUTEX_WAKE without FUTEX_PRIVATE_FLAG, as record's trampolines make them
    // on the shared call buffer; glibc's own locks use the private ones, which stay allowed.
    rc = seccomp_rule_add(ctx, act, SCMP_SYS(futex), 1, SCMP_A1(SCMP_CMP_EQ, FUTEX_WAIT));
    rc |= seccomp_rule_add(ctx, act, SCMP_SYS(futex), 1, SCMP_A1(SCMP_CMP_EQ, FUTEX_WAKE));
  } else if (act && call == "memfd_create") {
    rc = seccomp_rule_add(ctx, act, seccomp_syscall_resolve_name(call.c_str()), 0);
  }
  if (rc != 0 || seccomp_load(ctx) != 0) {
    std::cerr << "fault_busy: bad --seccomp " << spec << "\n";
    std::exit(2);
  }
  seccomp_release(ctx);
}

int run_idle(unsigned threads, const std::string& seccomp) {
  Rounds rounds(threads);
  if (!seccomp.empty()) load_seccomp(seccomp);
  fault::say("ready " + std::to_string(getpid()));
  for (std::string line; std::getline(std::cin, line);) {
    if (line.rfind("go ", 0) == 0) {
      rounds.go(std::stoull(line.substr(3)));
      fault::say("done calls=" + std::to_string(fault::g_calls.load()));
    } else if (line == "stop") {
      break;
    }
  }
  return 0;
}

int run_bounded(unsigned threads, std::uint64_t calls) {
  fault::say("ready " + std::to_string(getpid()));
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) {
    ts.emplace_back([calls] {
      for (std::uint64_t i = 0; i < calls; ++i) fault::call_probe(i);
    });
  }
  for (auto& t : ts) t.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  unsigned threads = std::stoul(fault::option(argc, argv, "--threads", "2"));
  int code = 0;
  std::string extra;
  if (fault::flag(argc, argv, "--idle")) {
    code = run_idle(threads, fault::option(argc, argv, "--seccomp", ""));
  } else if (fault::flag(argc, argv, "--calls")) {
    code = run_bounded(threads, std::stoull(fault::option(argc, argv, "--calls", "1")));
  } else {
    std::vector<std::thread> ts;
    if (fault::flag(argc, argv, "--churn")) {
      ts.emplace_back(churn);
    } else if (fault::flag(argc, argv, "--rate")) {
      double rate = std::stod(fault::option(argc, argv, "--rate", "100"));
      for (unsigned t = 0; t < threads; ++t) ts.emplace_back(paced, rate, threads);
    } else {
      for (unsigned t = 0; t < threads; ++t) ts.emplace_back(hammer);
      extra = "loops";
    }
    fault::say("ready " + std::to_string(getpid()));
    for (std::string line; std::getline(std::cin, line) && line != "stop";) {
    }
    g_stop = true;
    for (auto& t : ts) t.join();
    if (!extra.empty()) extra = "loops=" + std::to_string(g_loops.load());
  }
  fault::say_end(extra);
  return code;
}
