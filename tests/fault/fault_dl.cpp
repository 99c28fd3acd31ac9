// A process whose libraries come and go while its threads call into them.
//   fault_dl --lib1 LIB1 --lib2 LIB2 [--threads N] [--ctl-fd FD]
// N threads (2) call dl_probe of the library loaded now, without pause, and check each result.
// Commands on stdin:
//   open 1|2   dlopen LIB1 or LIB2               -> "opened 0xADDR" (dl_probe)
//   close      dlclose it, no thread inside it   -> "closed calls1=N" (calls into LIB1 so far)
//   stop       -> "end calls=... bad=... ..."
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "target_common.hpp"

namespace {

using Fn = std::uint64_t (*)(std::uint64_t);
std::shared_mutex g_lock;  // shared while a thread is inside the library; dlclose takes it
void* g_lib = nullptr;
Fn g_probe = nullptr, g_expected = nullptr;
int g_which = 0;
std::atomic<std::uint64_t> g_calls1{0};
std::atomic<bool> g_stop{false};
// Set while open or close waits for the lock: glibc's rwlock prefers readers, and threads that
// take it back at once would starve the writer.
std::atomic<bool> g_waiting{false};

// The lock held exclusively, no thread inside the library.
std::unique_lock<std::shared_mutex> exclusive() {
  g_waiting = true;
  std::unique_lock lock(g_lock);
  g_waiting = false;
  return lock;
}

void hammer() {
  for (std::uint64_t i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    if (g_waiting.load(std::memory_order_relaxed)) {
      std::this_thread::yield();
      continue;
    }
    std::shared_lock lock(g_lock);
    if (!g_probe) continue;
    if (g_probe(i) != g_expected(i)) fault::g_bad.fetch_add(1, std::memory_order_relaxed);
    fault::g_calls.fetch_add(1, std::memory_order_relaxed);
    if (g_which == 1) g_calls1.fetch_add(1, std::memory_order_relaxed);
  }
}

void open_lib(const std::string& path, int which) {
  auto lock = exclusive();
  g_lib = ::dlopen(path.c_str(), RTLD_NOW);
  if (!g_lib) {
    fault::say(std::string("error ") + ::dlerror());
    return;
  }
  g_probe = reinterpret_cast<Fn>(::dlsym(g_lib, "dl_probe"));
  g_expected = reinterpret_cast<Fn>(::dlsym(g_lib, "dl_expected"));
  g_which = which;
  char buf[64];
  std::snprintf(buf, sizeof buf, "opened %p", reinterpret_cast<void*>(g_probe));
  fault::say(buf);
}

void close_lib() {
  auto lock = exclusive();
  if (g_lib) ::dlclose(g_lib);
  g_lib = nullptr;
  g_probe = g_expected = nullptr;
  g_which = 0;
  fault::say("closed calls1=" + std::to_string(g_calls1.load()));
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  unsigned threads = std::stoul(fault::option(argc, argv, "--threads", "2"));
  std::string libs[2] = {fault::option(argc, argv, "--lib1", ""),
                         fault::option(argc, argv, "--lib2", "")};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) ts.emplace_back(hammer);
  fault::say("ready " + std::to_string(getpid()));
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "open 1" || line == "open 2") open_lib(libs[line[5] - '1'], line[5] - '0');
    if (line == "close") close_lib();
    if (line == "stop") break;
  }
  g_stop = true;
  for (auto& t : ts) t.join();
  fault::say_end("calls1=" + std::to_string(g_calls1.load()));
  return 0;
}
