// A closed-loop client and server over two pipes: the client sends a request and waits for the
// reply before it sends the next, so the server's rate of requests is whatever a request costs
// end to end. probecost overhead -p SERVER measures what a probe on the server's handler does
// to that rate; the client's own count of requests is the truth to check it against.
//   pingpong [--log FILE] [--report]
// Prints "ready SERVER_PID" once requests flow. Runs until SIGTERM or SIGINT, then (with --log)
// writes the CLOCK_MONOTONIC time of every completed request to FILE (binary doubles) and
// exits 0. --report: the client's requests per second on stderr, once a second.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "inferior/sanitizer_options.hpp"

namespace {

std::atomic<bool> g_stop{false};

void on_stop(int) {
  g_stop = true;
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

// The server's request handler: the probe site, long enough for a jump (a hash of the request).
extern "C" __attribute__((noipa)) std::uint64_t pingpong_serve(std::uint64_t request) {
  std::uint64_t h = request * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  asm volatile("" : "+r"(h));
  return h;
}

namespace {

[[noreturn]] void serve(int in, int out) {
  std::uint64_t request = 0;
  while (::read(in, &request, sizeof request) == sizeof request) {
    std::uint64_t reply = pingpong_serve(request);
    if (::write(out, &reply, sizeof reply) != sizeof reply) break;
  }
  ::_exit(0);
}

void write_log(const char* path, const std::vector<double>& times) {
  FILE* f = std::fopen(path, "wb");
  if (!f) return std::perror(path);
  std::fwrite(times.data(), sizeof(double), times.size(), f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const char* log = nullptr;
  bool report = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--log") && i + 1 < argc) log = argv[++i];
    if (!std::strcmp(argv[i], "--report")) report = true;
  }
  int to_server[2], to_client[2];
  if (::pipe(to_server) != 0 || ::pipe(to_client) != 0) return 1;
  pid_t server = ::fork();
  if (server == 0) {
    ::close(to_server[1]);
    ::close(to_client[0]);
    serve(to_server[0], to_client[1]);
  }
  ::close(to_server[0]);
  ::close(to_client[1]);
  struct sigaction sa = {};
  sa.sa_handler = on_stop;  // no SA_RESTART: a blocked read returns EINTR
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::vector<double> times;
  times.reserve(1 << 20);
  double next_report = now_s() + 1;
  std::uint64_t since_report = 0;
  for (std::uint64_t request = 0; !g_stop; ++request) {
    std::uint64_t reply = 0;
    if (::write(to_server[1], &request, sizeof request) != sizeof request) break;
    if (::read(to_client[0], &reply, sizeof reply) != sizeof reply) break;
    double t = now_s();
    if (log) times.push_back(t);
    if (request == 0) {
      std::printf("ready %d\n", static_cast<int>(server));
      std::fflush(stdout);
    }
    ++since_report;
    if (report && t >= next_report) {
      std::fprintf(stderr, "pingpong: %llu requests/s\n",
                   static_cast<unsigned long long>(since_report));
      since_report = 0;
      next_report += 1;
    }
  }
  ::close(to_server[1]);  // the server reads end-of-file and exits
  ::waitpid(server, nullptr, 0);
  if (log) write_log(log, times);
  return 0;
}
