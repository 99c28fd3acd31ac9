#include "tracer/os/maps.hpp"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/error.hpp"

namespace probecost {

std::optional<Mapping> parse_maps_line(const std::string& line) {
  std::uint64_t start, end, offset;
  unsigned long long inode = 0;
  char perms[5] = {}, dev[16] = {};
  int path_at = 0;
  if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %15s %llu %n", &start,
                  &end, perms, &offset, dev, &inode, &path_at) < 4) {
    return std::nullopt;
  }
  Mapping m;
  m.start = RuntimeAddr(start);
  m.end = RuntimeAddr(end);
  m.read = perms[0] == 'r';
  m.write = perms[1] == 'w';
  m.exec = perms[2] == 'x';
  m.offset = offset;
  m.file_id = std::string(dev) + ":" + std::to_string(inode);
  if (path_at > 0 && static_cast<std::size_t>(path_at) < line.size()) m.path = line.substr(path_at);
  return m;
}

std::vector<Mapping> parse_maps(const std::string& text) {
  std::vector<Mapping> maps;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (auto m = parse_maps_line(line)) maps.push_back(*m);
  }
  return maps;
}

int open_mapped_file(pid_t pid, const Mapping& m) {
  std::string proc = "/proc/" + std::to_string(pid) + "/";
  char exe[PATH_MAX];
  ssize_t n = ::readlink((proc + "exe").c_str(), exe, sizeof exe - 1);
  if (n > 0 && std::string(exe, static_cast<std::size_t>(n)) == m.path) {
    int fd = ::open((proc + "exe").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return fd;
  }
  char range[64];
  std::snprintf(range, sizeof range, "map_files/%" PRIx64 "-%" PRIx64, m.start.value(),
                m.end.value());
  int fd = ::open((proc + range).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && !m.path.empty() && m.path[0] == '/')
    fd = ::open(m.path.c_str(), O_RDONLY | O_CLOEXEC);
  return fd;
}

std::vector<Mapping> read_maps(pid_t pid) {
  std::string file = "/proc/" + std::to_string(pid) + "/maps";
  std::ifstream in(file);
  if (!in) throw Error::from_errno("cannot read " + file);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_maps(text.str());
}

std::optional<RuntimeAddr> free_range_near(const std::vector<Mapping>& maps, RuntimeAddr near,
                                           std::uint64_t size, std::uint64_t reach) {
  constexpr std::uint64_t kLow = 0x10000;             // below mmap_min_addr
  constexpr std::uint64_t kHigh = 0x7ffffffff000ull;  // top of the user address space
  std::optional<RuntimeAddr> best;
  std::uint64_t best_distance = UINT64_MAX;
  std::uint64_t gap_start = kLow;
  auto consider = [&](std::uint64_t lo, std::uint64_t hi) {
    // Only user space: the gap below [vsyscall] (0xffffffffff600000) reaches far above it.
    lo = std::max(lo, kLow);
    hi = std::min(hi, kHigh);
    if (hi <= lo || hi - lo < size) return;
    // The page-aligned start in [lo, hi - size] closest to `near`.
    std::uint64_t want = near.value() & ~0xfffull;
    std::uint64_t pick = want < lo ? lo : (want > hi - size ? hi - size : want);
    pick = (pick + 0xfff) & ~0xfffull;  // a gap's ends need not be page-aligned in a bad text
    if (pick < lo || pick > hi - size) return;
    std::uint64_t distance = pick > near.value() ? pick - near.value() : near.value() - pick;
    // distance > reach first: distance + size can wrap around for far-away gaps.
    if (distance <= reach && distance + size <= reach && distance < best_distance) {
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
