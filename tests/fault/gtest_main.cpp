// The main() of the fault tests' GoogleTest binaries: they need ptrace (exit 77, a skip, on a
// machine that forbids it; listing the tests needs nothing), write to pipes of targets that may
// be gone (SIGPIPE ignored), and reap the targets their probecost leaves orphaned (a subreaper).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstring>

#include "proc.hpp"
#include "scenario.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strstr(argv[i], "list_tests");
  if (!listing && !fault::ptrace_allowed()) {
    std::printf("this machine forbids ptrace: skipped\n");
    return 77;
  }
  ::signal(SIGPIPE, SIG_IGN);
  fault::become_subreaper();
  return RUN_ALL_TESTS();
}
