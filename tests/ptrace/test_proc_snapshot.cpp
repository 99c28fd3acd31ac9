// What the tracer keeps of /proc while a process is held (TracedProcess::maps, proc_tid): kept
// only while nothing that could change it has run. An injected mmap or munmap, a thread
// resumed, and a leader that has exited (pthread_exit) while its other threads run are each
// seen at the next look.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tracer/core/family.hpp"
#include "tracer/os/proc_files.hpp"

using namespace probecost;

namespace {

int g_ask[2], g_tell[2];

// The child's one thread after its leader's pthread_exit: maps a page when asked, says where.
void* mapper(void*) {
  for (char c; ::read(g_ask[0], &c, 1) == 1;) {
    void* at = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ::write(g_tell[1], &at, sizeof at);
  }
  return nullptr;
}

bool maps_hold(TracedProcess& proc, std::uint64_t at) {
  auto maps = proc.maps();
  return std::any_of(maps.begin(), maps.end(),
                     [&](const Mapping& m) { return m.contains(RuntimeAddr(at)); });
}

// Polled with a bound, not slept for: the leader's exit is the kernel's to finish.
bool leader_is_zombie(pid_t pid) {
  for (int i = 0; i < 5000; ++i) {
    if (stat_field(pid, 3) == "Z") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

struct ZombieLeaderChild {
  pid_t pid = 0;
  ZombieLeaderChild() {
    if (::pipe(g_ask) != 0 || ::pipe(g_tell) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      pthread_t t;
      ::pthread_create(&t, nullptr, mapper, nullptr);
      ::pthread_exit(nullptr);  // the leader goes; the process lives on in `mapper`
    }
    ::close(g_ask[0]);
    ::close(g_tell[1]);
  }
  std::uint64_t map_a_page() {
    void* at = nullptr;
    if (::write(g_ask[1], "m", 1) != 1 || ::read(g_tell[0], &at, sizeof at) != sizeof at) return 0;
    return reinterpret_cast<std::uint64_t>(at);
  }
  ~ZombieLeaderChild() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(g_ask[1]);
    ::close(g_tell[0]);
  }
};

}  // namespace

TEST(ProcSnapshot, InjectedMmapAndMunmapAreSeenAtTheNextLook) {
  ZombieLeaderChild child;
  ASSERT_GT(child.pid, 0);
  ASSERT_TRUE(leader_is_zombie(child.pid));
  auto family = Family::attach(child.pid);
  TracedProcess& proc = family->root();
  // The leader is a zombie, not in a stop of ours: /proc/PID/maps would be empty.
  EXPECT_NE(proc.proc_tid(), child.pid);
  auto before = proc.maps();
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(proc.maps().size(), before.size());  // nothing ran: the same
  auto at =
      proc.calls().syscall(SYS_mmap, {0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0});
  ASSERT_TRUE(at && *at > 0) << (at ? *at : 0);
  EXPECT_TRUE(maps_hold(proc, static_cast<std::uint64_t>(*at)));
  auto gone = proc.calls().syscall(SYS_munmap, {*at, 4096, 0, 0, 0, 0});
  ASSERT_TRUE(gone && *gone == 0);
  EXPECT_FALSE(maps_hold(proc, static_cast<std::uint64_t>(*at)));
  proc.detach();
}

TEST(ProcSnapshot, AThreadResumedMapsWhatTheNextLookSees) {
  ZombieLeaderChild child;
  ASSERT_GT(child.pid, 0);
  ASSERT_TRUE(leader_is_zombie(child.pid));
  auto family = Family::attach(child.pid);
  TracedProcess& proc = family->root();
  auto held = proc.maps();  // read with every thread stopped: kept until one runs
  proc.resume_stopped(proc.thread_ids(true));
  std::uint64_t at = child.map_a_page();  // mapped by the program itself, running
  ASSERT_NE(at, 0u);
  EXPECT_FALSE(std::any_of(held.begin(), held.end(),
                           [&](const Mapping& m) { return m.contains(RuntimeAddr(at)); }));
  EXPECT_TRUE(maps_hold(proc, at));
  proc.stop_all();
  EXPECT_TRUE(maps_hold(proc, at));
  EXPECT_NE(proc.proc_tid(), child.pid);
  proc.detach();
}
