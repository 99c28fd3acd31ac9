#pragma once
// /proc/PID/maps, parsed.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/address.hpp"

namespace probecost {

struct Mapping {
  RuntimeAddr start, end;
  bool read = false, write = false, exec = false;
  std::uint64_t offset = 0;
  std::string file_id;  // "device:inode" of a file mapping
  std::string path;
  bool contains(RuntimeAddr a) const { return start <= a && a < end; }
};

std::vector<Mapping> read_maps(pid_t pid);
// One line of /proc/PID/maps ("start-end perms offset dev inode [path]"); nullopt when it is
// not one.
std::optional<Mapping> parse_maps_line(const std::string& line);
// Every line of a whole /proc/PID/maps text; lines that are not mappings are skipped.
std::vector<Mapping> parse_maps(const std::string& text);
// The file a mapping maps, opened read-only: the very file, even if it was replaced or deleted
// on disk since, or is a memfd: through /proc/PID/exe when it is the executable (open to whoever
// may trace the process), /proc/PID/map_files (root, or CAP_CHECKPOINT_RESTORE); else by its
// path. -1 when none opens.
int open_mapped_file(pid_t pid, const Mapping& m);
// A free, page-aligned range of `size` bytes as close to `near` as possible and within
// `reach` bytes of it; none if every range in reach is taken.
std::optional<RuntimeAddr> free_range_near(const std::vector<Mapping>& maps, RuntimeAddr near,
                                           std::uint64_t size, std::uint64_t reach);

}  // namespace probecost
