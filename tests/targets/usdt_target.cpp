// A tracee with USDT markers (tests/targets/usdt_probes.hpp), driven on stdin, one command a
// line, each answered with one line:
//   fire N      probecost_test:tick N times     -> "fired=TOTAL enabled=E" (E: markers that saw
//               their semaphore raised, so computed their arguments; counted by the program)
//   plain N     probecost_test:plain N times    -> "plain=TOTAL" (no semaphore)
//   bench N     fire N, timed                   -> "bench=N ns=T" (T: the N markers' wall time,
//               for scripts/usdt-vs-bpftrace.sh)
//   sema        the tick semaphore's value      -> "sema=V"
//   raise       adds one to it, as another tracer would (bpftrace's uprobe) -> "sema=V"
//   lower       takes that one away             -> "sema=V"
//   open PATH   dlopen(PATH) (tests/targets/usdt_lib.cpp)  -> "opened"
//   libfire N   its marker N times              -> "libfired=N enabled=E"
//   nest N D    N calls of a function that calls itself D deep, each call between the markers
//               probecost_test:call__entry(name, depth) and call__return(name, depth) and
//               firing probecost_test:step(depth) -> "nested=N*D" (names "top", then "odd"
//               and "even" by depth)
//   unbalanced  call__return("stray", 0) twice, then call__entry("open", 0), never returned
//               -> "unbalanced"
//   fork        a child that reports its semaphore's value and how many mappings of ours
//               (read-only anonymous pages) it has, then exits -> "child sema=V ro_anon=N"
// Prints "ready PID" first. With arguments, runs them as one command and exits.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tests/targets/usdt_probes.hpp"

PROBECOST_SEMAPHORE(probecost_test, tick)
PROBECOST_SEMAPHORE(probecost_test, call__entry)
PROBECOST_SEMAPHORE(probecost_test, call__return)
PROBECOST_SEMAPHORE(probecost_test, step)

void probecost_usdt_plain_one(long* count);  // usdt_plain.cpp

namespace {

long g_fired = 0, g_enabled = 0, g_plain = 0;
long (*g_lib_fire)(long) = nullptr;

void reply(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

// One marker, with the argument kinds USDT notes describe: a register, a negative 32-bit
// value, a constant and a string.
__attribute__((noinline)) void fire_one(long i) {
  if (PROBECOST_ENABLED(probecost_test, tick)) {
    ++g_enabled;
    int neg = -static_cast<int>(i);
    const char* name = "tick";
    DTRACE_PROBE4(probecost_test, tick, i, neg, 42, name);
  } else {
    DTRACE_PROBE4(probecost_test, tick, i, 0, 42, "");
  }
  ++g_fired;
}

__attribute__((noinline)) long nest(const char* name, int depth) {
  DTRACE_PROBE2(probecost_test, call__entry, name, depth);
  DTRACE_PROBE1(probecost_test, step, depth);
  long n = 1;
  if (depth > 1) n += nest(depth % 2 ? "even" : "odd", depth - 1);
  DTRACE_PROBE2(probecost_test, call__return, name, depth);
  return n;
}

void unbalanced() {
  for (int i = 0; i < 2; ++i) DTRACE_PROBE2(probecost_test, call__return, "stray", 0);
  DTRACE_PROBE2(probecost_test, call__entry, "open", 0);
}

std::string sema() {
  return "sema=" + std::to_string(probecost_test_tick_semaphore);
}

// Read-only anonymous mappings of this process: none of the program's own.
int read_only_anonymous() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    n += perms == "r--p" && inode == "0" && path.empty();
  }
  return n;
}

std::string forked_child_view() {
  int p[2];
  if (::pipe(p) != 0) return "error pipe";
  pid_t child = ::fork();
  if (child == 0) {
    std::string s = "child " + sema() + " ro_anon=" + std::to_string(read_only_anonymous());
    [[maybe_unused]] ssize_t n = ::write(p[1], s.data(), s.size());
    ::_exit(0);
  }
  ::close(p[1]);
  char buf[128] = {};
  ssize_t n = ::read(p[0], buf, sizeof buf - 1);
  ::close(p[0]);
  ::waitpid(child, nullptr, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "error read";
}

bool run(const std::string& line) {
  std::istringstream in(line);
  std::string cmd, arg;
  in >> cmd >> arg;
  if (cmd == "fire") {
    for (long i = 0, n = std::stol(arg); i < n; ++i) fire_one(i);
    reply("fired=" + std::to_string(g_fired) + " enabled=" + std::to_string(g_enabled));
  } else if (cmd == "bench") {
    long n = std::stol(arg);
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) fire_one(i);
    auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    reply("bench=" + std::to_string(n) + " ns=" + std::to_string(ns.count()));
  } else if (cmd == "plain") {
    for (long i = 0, n = std::stol(arg); i < n; ++i) probecost_usdt_plain_one(&g_plain);
    reply("plain=" + std::to_string(g_plain));
  } else if (cmd == "sema") {
    reply(sema());
  } else if (cmd == "raise" || cmd == "lower") {
    probecost_test_tick_semaphore += cmd == "raise" ? 1 : -1;
    reply(sema());
  } else if (cmd == "open") {
    void* lib = ::dlopen(arg.c_str(), RTLD_NOW);
    if (lib) g_lib_fire = reinterpret_cast<long (*)(long)>(::dlsym(lib, "probecost_usdt_lib_fire"));
    reply(g_lib_fire ? "opened" : std::string("error ") + ::dlerror());
  } else if (cmd == "libfire") {
    long n = std::stol(arg);
    long enabled = g_lib_fire ? g_lib_fire(n) : -1;
    reply("libfired=" + std::to_string(n) + " enabled=" + std::to_string(enabled));
  } else if (cmd == "nest") {
    std::string depth;
    in >> depth;
    long n = 0;
    for (long i = 0, calls = std::stol(arg); i < calls; ++i) n += nest("top", std::stoi(depth));
    reply("nested=" + std::to_string(n));
  } else if (cmd == "unbalanced") {
    unbalanced();
    reply("unbalanced");
  } else if (cmd == "fork") {
    reply(forked_child_view());
  } else if (cmd == "exit") {
    reply("bye");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  reply("ready " + std::to_string(::getpid()));
  if (argc > 1) {  // one command from the arguments ("bench 1000"), for bpftrace -c
    std::string cmd;
    for (int i = 1; i < argc; ++i) cmd += std::string(i > 1 ? " " : "") + argv[i];
    run(cmd);
    return 0;
  }
  for (std::string line; std::getline(std::cin, line);) {
    if (!run(line)) break;
  }
  return 0;
}
