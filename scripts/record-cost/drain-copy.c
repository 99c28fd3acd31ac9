// Issue 24: the drain's copy of a ring to its spool, per 16-byte record (format 3: a call's
// entry or exit with 0 or 1 argument; format 2's were 32), by the copying thread's CPU clock:
// LAPS laps of a 16 MiB memfd ring in 1 MiB sub-buffers into an unlinked file in DIR,
// by write(2) from a mapping (as record's drain does: first lap cold, or every page of the
// mapping read once by the kernel before), copy_file_range, splice through a pipe, sendfile.
// scripts/record-cost.sh builds and runs it.
//
//   drain-copy [DIR] [LAPS]
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <time.h>
#include <unistd.h>

enum { kRing = 16 << 20, kSub = 1 << 20 };
static double cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
// A byte of each page read by the kernel through the mapping (pwrite of it, one byte, over the
// same byte of a scratch file): what warms the kernel's side of the mapping.
static void warm_kernel_reads(const char* dir, const char* r) {
  int t = open(dir, O_TMPFILE | O_RDWR, 0600);
  for (size_t at = 0; at < kRing; at += 4096)
    if (pwrite(t, r + at, 1, 0) != 1) perror("pwrite");
  close(t);
}
static ssize_t splice_all(int from, loff_t at, int pipe_r, int pipe_w, int out) {
  ssize_t n = 0;
  while (n < kSub) {
    ssize_t got = splice(from, &at, pipe_w, 0, kSub - n, SPLICE_F_MOVE);
    if (got <= 0) return -1;
    for (ssize_t put = 0; put < got;) {
      ssize_t k = splice(pipe_r, 0, out, 0, got - put, SPLICE_F_MOVE);
      if (k <= 0) return -1;
      put += k;
    }
    n += got;
  }
  return n;
}
int main(int argc, char** argv) {
  const char* dir = argc > 1 ? argv[1] : "/var/tmp";
  int laps = argc > 2 ? atoi(argv[2]) : 4;
  setvbuf(stdout, 0, _IONBF, 0);
  const char* names[] = {"write(2) from our mapping (first lap cold)",
                         "write(2) from our mapping, its pages read once first",
                         "copy_file_range from the memfd", "splice memfd -> pipe -> file",
                         "sendfile from the memfd"};
  for (int how = 0; how < 5; ++how) {
    int mfd = memfd_create("ring", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, kRing)) return 1;
    char* w = mmap(0, kRing, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, 0);
    memset(w, 0x5a, kRing);  // the writers' records (the tracee's mapping, in record)
    char* r = mmap(0, kRing, PROT_READ, MAP_SHARED | MAP_POPULATE, mfd, 0);  // the drain's
    if (how == 1) warm_kernel_reads(dir, r);
    int out = open(dir, O_TMPFILE | O_RDWR, 0600), p[2];
    if (out < 0 || pipe(p)) return perror(dir), 1;
    fcntl(p[1], F_SETPIPE_SZ, kSub);
    double c0 = cpu_ns();
    long long total = 0;
    loff_t out_at = 0;
    const char* refused = 0;
    for (int lap = 0; lap < laps && !refused; ++lap) {
      for (loff_t at = 0; at < kRing && !refused; at += kSub) {
        ssize_t n;
        loff_t in = at;
        off_t in_off = at;
        if (how <= 1) n = write(out, r + at, kSub);
        else if (how == 2) n = copy_file_range(mfd, &in, out, &out_at, kSub, 0);
        else if (how == 3) n = splice_all(mfd, at, p[0], p[1], out);
        else n = sendfile(out, mfd, &in_off, kSub);
        if (n != kSub) refused = strerror(errno);
        total += n;
      }
    }
    double ns = cpu_ns() - c0;
    if (refused) printf("  %-54s refused: %s\n", names[how], refused);
    else printf("  %-54s %6.2f ns per 16-byte record (%lld MiB to %s)\n", names[how],
                ns / (total / 16), total >> 20, dir);
    close(out), close(p[0]), close(p[1]), close(mfd);
    munmap(w, kRing), munmap(r, kRing);
  }
  return 0;
}
