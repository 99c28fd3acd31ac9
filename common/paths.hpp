#pragma once
// File-path helpers for reports.
#include <string>

namespace probecost {

// The last component of `path`: "/usr/lib/libc.so.6" -> "libc.so.6", "a.out" -> "a.out".
inline std::string base_name(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

}  // namespace probecost
