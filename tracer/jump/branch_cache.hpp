#pragma once
// The branch index of a module (breakpoint/x86/branch_scan.hpp) on disk, per build-id: decoding all
// of libc takes tens of milliseconds, reading the index back about one. In
// cache_dir()/branches/BUILD-ID; a file that is not exactly what store_branches wrote for that
// build-id and code size (corrupt, truncated, another version) is ignored and written again.
#include <cstdint>
#include <optional>
#include <string>

#include "breakpoint/x86/branch_scan.hpp"

namespace probecost {

// The cached index of the module with `build_id` (hex) and `code_bytes` bytes of code.
std::optional<BranchIndex> load_branches(const std::string& build_id, std::uint64_t code_bytes);
// Stores it (best effort: a cache that cannot be written only costs time).
void store_branches(const std::string& build_id, std::uint64_t code_bytes,
                    const BranchIndex& index);
// Where the index of `build_id` is cached; empty when there is no cache directory.
std::string branch_cache_path(const std::string& build_id);

}  // namespace probecost
