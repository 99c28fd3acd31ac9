// probecost-guard PROTOCOL PID IN MEM MAPS: the guardian of process PID (tracer/int3/guardian.hpp),
// spawned by probecost with the pipe's read end IN, /proc/PID/mem MEM and /proc/PID/maps MAPS
// as inherited descriptors. A program of its own, so that starting it shares none of
// probecost's pages: a fork of probecost would leave every one of them copy-on-write, and each
// first write after it a page fault of probecost's while the attach holds the program.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tracer/int3/guard_loop.hpp"

namespace {

// A descriptor number from argv, open in this process; -1 otherwise.
int descriptor(const char* arg) {
  char* end = nullptr;
  errno = 0;
  long fd = std::strtol(arg, &end, 10);
  if (errno || end == arg || *end || fd < 0 || fd > 1 << 20) return -1;
  return ::fcntl(static_cast<int>(fd), F_GETFD) < 0 ? -1 : static_cast<int>(fd);
}

}  // namespace

// Exits 0 once the guardian runs, 1 when it could not be started, 2 for arguments it does not
// understand (probecost then forks a guardian of its own).
int main(int argc, char** argv) {
  if (argc != 6 || std::strcmp(argv[1], probecost::guard::kProtocol) != 0) return 2;
  char* end = nullptr;
  long pid = std::strtol(argv[2], &end, 10);
  int in = descriptor(argv[3]), mem = descriptor(argv[4]), maps = descriptor(argv[5]);
  if (*end || pid <= 0 || in < 0 || mem < 0 || maps < 0) return 2;
  // The guardian proper is our child, and we exit at once: it is re-parented to init, so
  // probecost's waitpid(-1, __WALL) never reports it (probecost waits for this process only).
  pid_t guardian = ::fork();
  if (guardian < 0) return 1;
  if (guardian > 0) ::_exit(0);
  probecost::guard::become_guardian(static_cast<pid_t>(pid), in, mem, maps, true);
}
