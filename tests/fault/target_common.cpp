#include "target_common.hpp"

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
}

void register_site(const void* site) {
  int i = g_site_count.load();
  if (i < kMaxSites) {
    g_sites[i] = site;
    g_site_count = i + 1;
  }
}

void call_probe(std::uint64_t x) {
  if (probe_fn(x) != expected_result(x)) g_bad.fetch_add(1, std::memory_order_relaxed);
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
bool traced() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("TracerPid:", 0) == 0) return std::stol(line.substr(10)) != 0;
  }
  return false;
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
  for (auto& c : text) c = c == ' ' ? '_' : c;
  say("end calls=" + std::to_string(g_calls.load()) + " bad=" + std::to_string(g_bad.load()) +
      " traps=" + std::to_string(g_traps.load()) + trap + " text=" + text +
      (extra.empty() ? "" : " " + extra));
}

std::uint64_t random_below(std::uint64_t n) {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  return n ? rng()() % n : 0;
}

}  // namespace fault
