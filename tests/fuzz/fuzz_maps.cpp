// libFuzzer: /proc/PID/maps text, as the kernel writes it or not. Every parsed mapping must
// be one the line said, and free_range_near must stay within what it was asked.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tracer/os/maps.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto maps = probecost::parse_maps(text);
  for (const auto& m : maps) {
    if (m.path.size() > text.size()) __builtin_trap();
  }
  if (maps.empty()) return 0;
  probecost::RuntimeAddr near = maps.front().start;
  constexpr std::uint64_t kReach = 1ull << 31;
  if (auto at = probecost::free_range_near(maps, near, 4096, kReach)) {
    std::uint64_t d =
        at->value() > near.value() ? at->value() - near.value() : near.value() - at->value();
    if (d + 4096 > kReach) __builtin_trap();
    if (at->value() % 4096) __builtin_trap();
  }
  return 0;
}
