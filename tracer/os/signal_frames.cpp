#include "tracer/os/signal_frames.hpp"

#include <cpuid.h>

#include <cstring>
#include <vector>

#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

constexpr std::uint32_t kFpXstateMagic1 = 0x46505853;
constexpr std::uint64_t kMagicOffset = 464;  // sw_reserved.magic1 in the 512-byte FXSAVE area

}  // namespace

bool signal_frames_marked() {
  static const bool marked = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) != 0;
  }();
  return marked;
}

bool bytes_hold_signal_mark(std::uint64_t start, std::span<const std::uint8_t> bytes) {
  // The FPU state is 64-byte aligned (fpu__alloc_mathframe) and 464 = 7 x 64 + 16: the mark
  // of any frame whose state lies in these bytes is at an address 16 past a multiple of 64.
  std::uint64_t at = (start & ~std::uint64_t{63}) + kMagicOffset % 64;
  if (at < start) at += 64;
  for (; at + 4 <= start + bytes.size(); at += 64) {
    std::uint32_t word;
    std::memcpy(&word, bytes.data() + (at - start), sizeof word);
    if (word == kFpXstateMagic1) return true;
  }
  return false;
}

bool holds_no_signal_frame(pid_t tid, std::uint64_t rsp, std::uint64_t end, std::uint64_t limit) {
  if (!signal_frames_marked() || end <= rsp || end - rsp > limit) return false;
  std::vector<std::uint8_t> bytes(end - rsp);
  if (sys::vm_read(tid, bytes.data(), bytes.size(), rsp, 1) != static_cast<ssize_t>(bytes.size()))
    return false;
  return !bytes_hold_signal_mark(rsp, bytes);
}

}  // namespace probecost
