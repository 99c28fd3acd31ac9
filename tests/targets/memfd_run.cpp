// Runs code from a memfd, as fexecve users (container runtimes, self-updating daemons, packers)
// and in-memory plugin loaders do: /proc/PID/maps then names "/memfd:NAME (deleted)", a file no
// path opens.
//   memfd_run exec PROGRAM ARGS...   fexecve PROGRAM's copy
//   memfd_run dlopen LIBRARY N       dlopen LIBRARY's copy (through /proc/self/fd), print
//                                    "ready PID", then answer stdin's lines: "go" calls its
//                                    probecost_soname_site N times more -> "calls=TOTAL";
//                                    "exit" -> "bye"
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "inferior/sanitizer_options.hpp"

extern char** environ;

namespace {

// A memfd called `name` holding a copy of the file at `path`; exits on failure.
int copy_to_memfd(const char* path, const char* name, unsigned flags) {
  int in = ::open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (in < 0 || ::fstat(in, &st) != 0) {
    std::perror(path);
    std::exit(1);
  }
  int mem = ::memfd_create(name, flags);
  for (off_t off = 0; off < st.st_size;) {
    if (mem < 0 || ::sendfile(mem, in, &off, static_cast<std::size_t>(st.st_size - off)) <= 0) {
      std::perror("memfd copy");
      std::exit(1);
    }
  }
  ::close(in);
  return mem;
}

int run_library(const char* path, long n) {
  int mem = copy_to_memfd(path, "probecost-memfd-lib", 0);
  std::string self = "/proc/self/fd/" + std::to_string(mem);
  void* lib = ::dlopen(self.c_str(), RTLD_NOW);
  auto site = lib ? reinterpret_cast<std::uint64_t (*)(std::uint64_t)>(
                        ::dlsym(lib, "probecost_soname_site"))
                  : nullptr;
  if (!site) {
    std::fprintf(stderr, "dlopen %s: %s\n", path, ::dlerror());
    return 1;
  }
  std::printf("ready %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  std::uint64_t calls = 0;
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "exit") break;
    for (long i = 0; i < n; ++i) calls += site(i) != 0;
    std::printf("calls=%llu\n", static_cast<unsigned long long>(calls));
    std::fflush(stdout);
  }
  std::printf("bye\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc >= 3 ? argv[1] : "";
  if (mode == "exec") {
    int mem = copy_to_memfd(argv[2], "probecost-memfd-target", MFD_CLOEXEC);
    ::fexecve(mem, argv + 2, environ);
    std::perror("fexecve");
    return 1;
  }
  if (mode == "dlopen" && argc == 4) return run_library(argv[2], std::atol(argv[3]));
  std::fprintf(stderr, "usage: memfd_run exec PROGRAM ARGS... | memfd_run dlopen LIBRARY N\n");
  return 2;
}
