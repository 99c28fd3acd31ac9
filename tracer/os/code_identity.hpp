#pragma once
// Which code a probe's bytes went into: the mapped file (device, inode) and the offset in it.
// Before any byte goes back, the mapping there now must be that same one and hold exactly the
// bytes probecost wrote. A library that was dlclose'd takes our bytes with it; another one
// dlopen'd at the same address must not get the old library's bytes written into its code.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/address.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

struct CodeIdentity {
  std::string file_id;  // "device:inode" (maps' own spelling)
  std::uint64_t file_offset = 0;
  std::string path;  // for messages
  bool operator==(const CodeIdentity& o) const {
    return file_id == o.file_id && file_offset == o.file_offset;
  }
};

// The identity of the code at `at` in `maps`; nothing when no mapping holds it.
std::optional<CodeIdentity> code_identity(const std::vector<Mapping>& maps, RuntimeAddr at);

// Empty when the bytes at `at` may be put back: the mapping there is `then`'s and `now` (the
// bytes there) is exactly `ours` (what probecost wrote). Otherwise why they must be left alone.
std::string why_not_ours(const CodeIdentity& then, const std::vector<Mapping>& maps, RuntimeAddr at,
                         std::span<const std::uint8_t> ours, std::span<const std::uint8_t> now);

}  // namespace probecost
