#include "target_common.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>

#include "text_check.hpp"

extern "C" __attribute__((noipa)) std::uint64_t probe_fn(std::uint64_t x) {
  fault::g_calls.fetch_add(1, std::memory_order_relaxed);
  return fault::expected_result(x);
}

namespace fault {

std::atomic<std::uint64_t> g_calls{0};
std::atomic<std::uint64_t> g_bad{0};

namespace {

int g_ctl_fd = 1;
constexpr int kMaxSites = 8;
const void* g_sites[kMaxSites];
std::atomic<int> g_site_count{0};
std::atomic<std::uint64_t> g_traps{0};
std::atomic<long> g_trap_code{0};
std::atomic<std::uintptr_t> g_trap_rip{0};
std::atomic<void (*)(int, siginfo_t*, void*)> g_own_handler{nullptr};

void write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// A stray SIGTRAP: recorded, and the thread put back where it can go on. An int3 still in
// place cannot be got past: the target ends at once with kExitInt3Left.
void on_sigtrap(int, siginfo_t* info, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  greg_t& rip = uc->uc_mcontext.gregs[REG_RIP];
  g_traps.fetch_add(1);
  g_trap_code = info->si_code;
  g_trap_rip = static_cast<std::uintptr_t>(rip);
  uc->uc_mcontext.gregs[REG_EFL] &= ~0x100;  // a trap flag left set would trap every insn
  for (int i = 0; i < g_site_count.load(); ++i) {
    auto site = reinterpret_cast<std::uintptr_t>(g_sites[i]);
    if (static_cast<std::uintptr_t>(rip) - 1 != site) continue;
    if (*reinterpret_cast<const volatile unsigned char*>(site) == 0xCC) {
      const char msg[] = "end int3-left-in-text\n";
      write_all(g_ctl_fd, msg, sizeof msg - 1);
      ::_exit(kExitInt3Left);
    }
    rip = static_cast<greg_t>(site);  // run the displaced instruction, restored, again
  }
}

// A fatal signal says where it came from on the control fd, then kills as it would have
// (SA_RESETHAND: the faulting instruction runs again under the default action).
void on_fatal(int sig, siginfo_t* info, void* context) {
  auto* uc = static_cast<ucontext_t*>(context);
  char line[200];
  int n = std::snprintf(line, sizeof line, "fatal sig=%d code=%d addr=%p rip=probe_fn%+lld\n", sig,
                        info->si_code, info->si_addr,
                        static_cast<long long>(uc->uc_mcontext.gregs[REG_RIP] -
                                               reinterpret_cast<std::intptr_t>(&probe_fn)));
  if (n > 0) write_all(g_ctl_fd, line, static_cast<std::size_t>(n));
}

std::mt19937_64& rng() {
  static std::mt19937_64 r;
  return r;
}

}  // namespace

std::string option(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return argv[i + 1];
  }
  return fallback;
}

bool flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    if (name == argv[i]) return true;
  }
  return false;
}

void init(int argc, char** argv) {
  g_ctl_fd = std::atoi(option(argc, argv, "--ctl-fd", "1").c_str());
  rng().seed(std::strtoull(option(argc, argv, "--seed", "1").c_str(), nullptr, 10));
  register_site(reinterpret_cast<const void*>(&probe_fn));
  struct sigaction sa = {};
  sa.sa_sigaction = on_sigtrap;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, nullptr);
  expect_sigtrap_handler(on_sigtrap);
  struct sigaction fatal = {};
  fatal.sa_sigaction = on_fatal;
  fatal.sa_flags = SA_SIGINFO | SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) sigaction(sig, &fatal, nullptr);
}

void expect_sigtrap_handler(void (*handler)(int, siginfo_t*, void*)) {
  g_own_handler = handler;
}

void register_site(const void* site) {
  int i = g_site_count.load();
  if (i < kMaxSites) {
    g_sites[i] = site;
    g_site_count = i + 1;
  }
}

void call_probe(std::uint64_t x) {
  // The high half set: probe_fn's first instruction is mov %rdi,%rax (48 89 f8), and a thread
  // resumed one byte past an int3 there runs 89 f8, mov %edi,%eax, which loses it. That shows
  // as a wrong result (the kernel resumes a thread so when its tracer dies while it waits in
  // its int3's SIGTRAP stop).
  x |= std::uint64_t{1} << 40;
  std::uint64_t got = probe_fn(x);
  if (got != expected_result(x)) {
    if (g_bad.fetch_add(1, std::memory_order_relaxed) == 0) {
      char line[160];
      int n =
          std::snprintf(line, sizeof line, "fatal wrong result for x=%#llx: %s\n",
                        static_cast<unsigned long long>(x),
                        got == expected_result(x & 0xffffffffu) ? "its low half's (mov %edi,%eax)"
                                                                : "something else");
      if (n > 0) write_all(g_ctl_fd, line, static_cast<std::size_t>(n));
    }
  }
}

void say(const std::string& line) {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  std::string l = line + "\n";
  write_all(g_ctl_fd, l.data(), l.size());
}

namespace {

// A tracer that still holds us has its int3 bytes in our text, rightly: compare the text with
// the files only when nobody traces us (an attached target after detach).
bool traced(const std::string& status) {
  std::ifstream in(status);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("TracerPid:", 0) == 0) return std::stol(line.substr(10)) != 0;
  }
  return false;
}

bool traced() {
  return traced("/proc/self/status");
}

// Whether a tracer holds any of our threads (one attaching seizes them one by one).
bool any_thread_traced() {
  DIR* d = ::opendir("/proc/self/task");
  bool any = false;
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    if (e->d_name[0] != '.')
      any = any || traced("/proc/self/task/" + std::string(e->d_name) + "/status");
  }
  if (d) ::closedir(d);
  return any;
}

// "own" when our SIGTRAP handler is the disposition, "other" when not; "traced" when a tracer
// held a thread of ours just before or just after we looked (its handler may be in meanwhile).
// "other:HANDLER" says what it is instead (SIG_DFL 0, SIG_IGN 0x1, or an address).
std::string sigtrap_state() {
  bool before = any_thread_traced();
  struct sigaction now = {};
  sigaction(SIGTRAP, nullptr, &now);
  if (before || any_thread_traced()) return "traced";
  if (now.sa_sigaction == g_own_handler.load()) return "own";
  char what[40];
  std::snprintf(what, sizeof what, "other:%#lx", reinterpret_cast<unsigned long>(now.sa_handler));
  return what;
}

}  // namespace

void say_end(const std::string& extra) {
  // Asked before and after the comparison: a tracer that attaches in between (the process
  // exits while probecost attaches) has rightly written its int3s by the time we read the text.
  bool check = !traced();
  auto diffs = check ? text_differences(::getpid(), 1) : std::vector<std::string>{};
  if (check && traced()) {
    check = false;
    diffs.clear();
  }
  char trap[96] = "";
  if (g_traps) {
    auto at =
        static_cast<long long>(g_trap_rip.load() - reinterpret_cast<std::uintptr_t>(&probe_fn));
    std::snprintf(trap, sizeof trap, " trap_code=%ld trap_at=probe_fn%+lld", g_trap_code.load(),
                  at);
  }
  std::string text = !check ? "traced" : diffs.empty() ? "ok" : diffs.front();
  // A tracer's SIGTRAP handler (probecost's stands in for it if it dies) must have given the
  // disposition back to the program when it let go.
  std::string sigtrap = sigtrap_state();
  for (auto& c : text) c = c == ' ' ? '_' : c;
  say("end calls=" + std::to_string(g_calls.load()) + " bad=" + std::to_string(g_bad.load()) +
      " traps=" + std::to_string(g_traps.load()) + trap + " text=" + text + " sigtrap=" + sigtrap +
      (extra.empty() ? "" : " " + extra));
}

std::uint64_t random_below(std::uint64_t n) {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  return n ? rng()() % n : 0;
}

}  // namespace fault
