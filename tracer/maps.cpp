#include "tracer/maps.hpp"

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "breakpoint/error.hpp"

namespace probecost {

std::vector<Mapping> read_maps(pid_t pid) {
  std::string file = "/proc/" + std::to_string(pid) + "/maps";
  std::ifstream in(file);
  if (!in) throw Error::from_errno("cannot read " + file);
  std::vector<Mapping> maps;
  for (std::string line; std::getline(in, line);) {
    std::uint64_t start, end, offset;
    char perms[5] = {};
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %*s %*u %n", &start,
                    &end, perms, &offset, &path_at) < 4) {
      continue;
    }
    Mapping m;
    m.start = RuntimeAddr(start);
    m.end = RuntimeAddr(end);
    m.read = perms[0] == 'r';
    m.write = perms[1] == 'w';
    m.exec = perms[2] == 'x';
    m.offset = offset;
    if (path_at > 0 && static_cast<std::size_t>(path_at) < line.size())
      m.path = line.substr(path_at);
    maps.push_back(m);
  }
  return maps;
}

std::optional<RuntimeAddr> free_range_near(const std::vector<Mapping>& maps, RuntimeAddr near,
                                           std::uint64_t size, std::uint64_t reach) {
  constexpr std::uint64_t kLow = 0x10000;             // below mmap_min_addr
  constexpr std::uint64_t kHigh = 0x7ffffffff000ull;  // top of the user address space
  std::optional<RuntimeAddr> best;
  std::uint64_t best_distance = UINT64_MAX;
  std::uint64_t gap_start = kLow;
  auto consider = [&](std::uint64_t lo, std::uint64_t hi) {
    if (hi <= lo || hi - lo < size) return;
    // The page-aligned start in [lo, hi - size] closest to `near`.
    std::uint64_t want = near.value() & ~0xfffull;
    std::uint64_t pick = want < lo ? lo : (want > hi - size ? hi - size : want);
    std::uint64_t distance = pick > near.value() ? pick - near.value() : near.value() - pick;
    if (distance + size <= reach && distance < best_distance) {
      best = RuntimeAddr(pick);
      best_distance = distance;
    }
  };
  for (const auto& m : maps) {
    consider(gap_start, m.start.value());
    gap_start = std::max(gap_start, m.end.value());
  }
  consider(gap_start, kHigh);
  return best;
}

}  // namespace probecost
