#include "breakpoint/in_tracee/warm_loop.hpp"

#include <cstring>

namespace probecost::warm {

std::vector<std::uint8_t> page_bytes(RuntimeAddr page, std::int32_t tracer) {
  std::vector<std::uint8_t> bytes(kCodeOffset + sizeof kLoop);
  ScratchHeader h{};
  std::memcpy(h.magic, kMagic, sizeof h.magic);
  h.area_address = page.value();
  h.area_size = kPageSize;
  h.tracer_pid = tracer;
  std::memcpy(bytes.data(), &h, sizeof h);
  std::memcpy(bytes.data() + kCodeOffset, kLoop, sizeof kLoop);
  return bytes;
}

bool is_warm_page(std::span<const std::uint8_t> first, RuntimeAddr page) {
  if (first.size() < kCodeOffset + sizeof kLoop) return false;
  ScratchHeader h{};
  std::memcpy(&h, first.data(), sizeof h);
  return std::memcmp(h.magic, kMagic, sizeof h.magic) == 0 && h.area_address == page.value() &&
         h.area_size == kPageSize &&
         std::memcmp(first.data() + kCodeOffset, kLoop, sizeof kLoop) == 0;
}

namespace {

bool in_loop(const LoopStop& s) {
  std::uint64_t start = s.page.value() + kCodeOffset;
  return s.rip >= start && s.rip <= s.page.value() + kRetOffset;
}

bool at_ret(const LoopStop& s) {
  return s.rip == s.page.value() + kRetOffset;
}

}  // namespace

std::optional<std::uint64_t> words_at(const LoopStop& s) {
  if (!in_loop(s)) return std::nullopt;
  return at_ret(s) ? s.rsp : s.rbp;
}

std::optional<Rest> rest_of_way(const LoopStop& s, std::span<const std::uint64_t, 2> words) {
  if (!in_loop(s)) return std::nullopt;
  // `ret`: RIP from the top of the stack.
  if (at_ret(s)) return Rest{words[0], s.rsp + 8, s.rbp};
  // `leave; ret` (the loop's writes and the getpid skipped: neither is the thread's own work):
  // RSP = RBP, RBP popped, RIP popped.
  return Rest{words[1], s.rbp + 16, words[0]};
}

}  // namespace probecost::warm
