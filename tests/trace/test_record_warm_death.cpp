// `record -p` killed (SIGKILL) while its call buffer is mapped in the process and about to be
// written through by the process's own loop (PROBECOST_DIE_AT_HIT=warm+N), then `probecost
// restore`: the process lives, its results stay right, and restore takes the 32 MiB buffer out,
// with no fd of it left in the process. Before, the buffer's header was written and the
// process's fd closed only after the loop: restore could not tell the buffer was ours (it kept
// it, and the fd pinned it), whatever it was asked.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "run_capture.hpp"
#include "temp_dir.hpp"

using namespace probecost::test;

namespace {

// stack_bounds_target serve: its stdin and stdout are pipes of ours.
struct Server {
  pid_t pid = -1;
  int in = -1;
  FILE* out = nullptr;
  Server() {
    int to[2], from[2];
    if (::pipe(to) != 0 || ::pipe(from) != 0) return;
    pid = ::fork();
    if (pid == 0) {
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      ::close(to[1]);
      ::close(from[0]);
      ::execl(STACK_BOUNDS_TARGET, STACK_BOUNDS_TARGET, "serve", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    in = to[1];
    out = ::fdopen(from[0], "r");
  }
  std::string line() {
    char buf[256];
    return out && std::fgets(buf, sizeof buf, out) ? std::string(buf) : std::string();
  }
  int finish() {
    ::close(in);
    in = -1;
    int status = wait_child(pid);
    pid = -1;
    return status;
  }
  ~Server() {
    if (in >= 0) ::close(in);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      wait_child(pid);
    }
    if (out) std::fclose(out);
  }
};

// Lines of /proc/PID/maps, and links of /proc/PID/fd, that name probecost's call buffer.
int call_buffers_in(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int n = 0;
  for (std::string l; std::getline(maps, l);) n += l.find("probecost-calls") != std::string::npos;
  std::error_code ec;
  for (const auto& fd :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    auto target = std::filesystem::read_symlink(fd.path(), ec);
    n += target.string().find("probecost-calls") != std::string::npos;
  }
  return n;
}

}  // namespace

TEST(RecordWarmDeath, RestoreTakesOutTheCallBufferOfARecordKilledBeforeTheLoopWritesIt) {
  TempDir dir;
  Server server;
  ASSERT_GT(server.pid, 0);
  ASSERT_EQ(server.line(), "ready\n");
  ::setenv("PROBECOST_DIE_AT_HIT", "warm+1", 1);
  Result r = run_command({PROBECOST_BIN, "record", "-q", "-p", std::to_string(server.pid), "-b",
                          "bounds_leaf", "-o", (dir.path / "t.json").string()});
  ::unsetenv("PROBECOST_DIE_AT_HIT");
  ASSERT_EQ(r.exit_code, -1) << "probecost was to die of SIGKILL; " << r.err;
  EXPECT_GT(call_buffers_in(server.pid), 0);  // what the death left: the mapping
  Result restore = run_command({PROBECOST_BIN, "restore", "-p", std::to_string(server.pid)});
  EXPECT_EQ(restore.exit_code, 0) << restore.err;
  EXPECT_NE(restore.out.find("unmapped"), std::string::npos) << restore.out << restore.err;
  EXPECT_EQ(call_buffers_in(server.pid), 0) << restore.out;  // before: the mapping and its fd
  int status = server.finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(server.line(), "calls=1 bad=0\n");
}
