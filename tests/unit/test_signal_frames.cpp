// holds_no_signal_frame on the test's own threads: a stack with no handler running holds no
// frame's mark; a handler's frame (on the thread's stack or an alternate one) is seen.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "tracer/os/maps.hpp"
#include "tracer/os/signal_frames.hpp"

namespace probecost {
namespace {

std::uint64_t mapping_end(std::uint64_t at) {
  for (const auto& m : read_maps(::getpid())) {
    if (m.contains(RuntimeAddr(at))) return m.end.value();
  }
  return 0;
}

// RSP as the handler or the test sees it (a local's address is at or above it).
std::uint64_t here() {
  volatile char c = 0;
  return reinterpret_cast<std::uint64_t>(&c) & ~std::uint64_t{63};
}

// The scan, made in the handler itself (raised synchronously: it may allocate).
std::uint64_t g_end = 0;
volatile int g_none = -1;
void scan_here(int) {
  g_none = holds_no_signal_frame(::gettid(), here(), g_end) ? 1 : 0;
}

bool scan_in_handler(bool on_altstack) {
  std::vector<char> alt(64 * 1024);
  g_end = mapping_end(here());
  if (on_altstack) {
    stack_t ss{};
    ss.ss_sp = alt.data();
    ss.ss_size = alt.size();
    EXPECT_EQ(::sigaltstack(&ss, nullptr), 0);
    g_end = reinterpret_cast<std::uint64_t>(alt.data()) + alt.size();
  }
  struct sigaction sa {
  }, old{};
  sa.sa_handler = scan_here;
  sa.sa_flags = on_altstack ? SA_ONSTACK : 0;
  ::sigaction(SIGUSR1, &sa, &old);
  g_none = -1;
  ::raise(SIGUSR1);
  ::sigaction(SIGUSR1, &old, nullptr);
  if (on_altstack) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
  }
  EXPECT_NE(g_none, -1) << "the handler did not run";
  return g_none == 1;
}

TEST(SignalFrames, TheMarkIsFoundOnlyWhereAFramesStateWouldHaveIt) {
  std::vector<std::uint8_t> bytes(4096);
  const std::uint32_t magic = 0x46505853;
  const std::uint64_t start = 0x7ffd0000;  // 64-byte aligned
  std::memcpy(bytes.data() + 64 * 3 + 16, &magic, 4);
  EXPECT_TRUE(bytes_hold_signal_mark(start, bytes));
  EXPECT_TRUE(bytes_hold_signal_mark(start + 8, std::span(bytes).subspan(8)));
  std::fill(bytes.begin(), bytes.end(), 0);
  std::memcpy(bytes.data() + 64 * 3 + 20, &magic, 4);  // not where a frame would put it
  EXPECT_FALSE(bytes_hold_signal_mark(start, bytes));
}

TEST(SignalFrames, AStackWithNoHandlerHoldsNone) {
  if (!signal_frames_marked()) GTEST_SKIP() << "this CPU or kernel does not use XSAVE";
  std::uint64_t rsp = here();
  // A fresh thread: its stack has never held a signal frame.
  bool none = false;
  std::thread t([&] {
    std::uint64_t r = here();
    none = holds_no_signal_frame(::gettid(), r, mapping_end(r));
  });
  t.join();
  EXPECT_TRUE(none);
  EXPECT_FALSE(holds_no_signal_frame(::gettid(), rsp, rsp));  // nothing to read: not proven
}

TEST(SignalFrames, AHandlersFrameIsSeenOnTheStackAndOnAnAlternateStack) {
  if (!signal_frames_marked()) GTEST_SKIP() << "this CPU or kernel does not use XSAVE";
  EXPECT_FALSE(scan_in_handler(false));
  EXPECT_FALSE(scan_in_handler(true));
}

}  // namespace
}  // namespace probecost
