// Issue 24: what the first write to a page of a shared memfd mapping costs, by the writer's
// thread CPU clock, and what makes it cheap. Printed per 4 KiB page, and the minor faults the
// guest counted. scripts/record-cost.sh builds and runs it.
//
//   first-touch [MiB]
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; Debian 12's headers predate it
#endif

static size_t size = 32u << 20;
static double cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static long minflt(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
// One write per page (a read and a write of one byte: no byte changes), timed.
static void pass(const char* what, char* p) {
  long f0 = minflt();
  double c0 = cpu_ns();
  for (size_t i = 0; i < size; i += 4096) ((volatile char*)p)[i] = ((volatile char*)p)[i];
  double us = (cpu_ns() - c0) / 1e3 / (size / 4096);
  printf("  %-62s %6.2f us/page %5ld faults\n", what, us, minflt() - f0);
}
static void timed(const char* what, double c0) {
  printf("  %-62s %6.2f us/page\n", what, (cpu_ns() - c0) / 1e3 / (size / 4096));
}
static int fresh(void) {
  int fd = memfd_create("ring", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, size)) exit(1);
  return fd;
}
static char* map(int fd, int flags) {
  char* p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);
  if (p == MAP_FAILED) exit(1);
  return p;
}
// In a child of its own (an address space of its own), on the pages `a` already wrote.
static void second_process(int fd, int how) {
  if (fork() == 0) {
    double c0 = cpu_ns();
    char* p = map(fd, how == 0 ? 0 : MAP_POPULATE);
    if (how == 0) pass("B, no populate: a write per page", p);
    if (how == 1) timed("B: MAP_POPULATE of pages A made", c0), pass("B: then a write per page", p);
    if (how == 2) {
      if (madvise(p, size, MADV_POPULATE_WRITE)) perror("madvise");
      timed("B: MAP_POPULATE + MADV_POPULATE_WRITE", c0);
      pass("B: then a write per page", p);
    }
    if (how == 3) {
      if (pread(fd, p, size, 0) != (ssize_t)size) perror("pread");
      timed("B: MAP_POPULATE, pread(2) of the memfd into it (kernel writes)", c0);
      pass("B: then a write per page", p);
    }
    pass("B: then a write per page again", p);
    _exit(0);
  }
  wait(0);
}
int main(int argc, char** argv) {
  setvbuf(stdout, 0, _IONBF, 0);
  if (argc > 1) size = strtoull(argv[1], 0, 0) << 20;
  printf("one process, %zu MiB memfd, MAP_SHARED:\n", size >> 20);
  int fd = fresh();
  char* a = map(fd, 0);
  pass("A, no populate: a write per page", a);
  pass("A: again", a);
  munmap(a, size);
  close(fd);
  fd = fresh();
  double c0 = cpu_ns();
  a = map(fd, MAP_POPULATE);
  timed("A: MAP_POPULATE (pages allocated, zeroed)", c0);
  pass("A: then a write per page", a);
  pass("A: again", a);
  printf("a second process B maps the same memfd pages:\n");
  for (int how = 0; how < 4; ++how) second_process(fd, how);
  pass("A: a write per page, after B's", a);
  return 0;
}
