// Runs a program from a memfd, as fexecve users (container runtimes, self-updating daemons,
// packers) do: /proc/PID/exe and /proc/PID/maps then name "/memfd:NAME (deleted)", a file no
// path opens.
//   memfd_exec PROGRAM ARGS...
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: memfd_exec PROGRAM ARGS...\n");
    return 2;
  }
  int in = ::open(argv[1], O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (in < 0 || ::fstat(in, &st) != 0) {
    std::perror(argv[1]);
    return 1;
  }
  int mem = ::memfd_create("probecost-memfd-target", MFD_CLOEXEC);
  for (off_t off = 0; mem >= 0 && off < st.st_size;) {
    if (::sendfile(mem, in, &off, static_cast<std::size_t>(st.st_size - off)) <= 0) {
      std::perror("sendfile");
      return 1;
    }
  }
  ::fexecve(mem, argv + 1, environ);
  std::perror("fexecve");
  return 1;
}
