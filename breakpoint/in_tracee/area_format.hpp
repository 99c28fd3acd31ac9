#pragma once
// What the jump area and the trap area share. Each describes itself to a later probecost (restore,
// after probecost was SIGKILLed) by the same leading header fields: magic, version, header_size,
// area_address, area_size, tracer_pid, and a checksum. A tracee can write anything there, so a
// reader trusts no field and no bound before it is checked.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "common/address.hpp"

namespace probecost::area {

inline std::uint64_t round_up(std::uint64_t v, std::uint64_t to) {
  return (v + to - 1) / to * to;
}

// Whether [offset, offset + size) lies within [0, limit), without overflow.
inline bool in(std::uint64_t offset, std::uint64_t size, std::uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

inline std::uint64_t fnv1a(std::span<const std::uint8_t> bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (auto b : bytes) hash = (hash ^ b) * 0x100000001b3ull;
  return hash;
}

// Writes the leading fields of a fresh (zeroed) header, but its checksum.
template <typename Header>
void write_identity(Header& h, const char (&magic)[8], std::uint32_t version, RuntimeAddr at,
                    std::uint64_t size, std::int32_t tracer_pid) {
  std::memcpy(h.magic, magic, sizeof h.magic);
  h.version = version;
  h.header_size = sizeof(Header);
  h.area_address = at.value();
  h.area_size = size;
  h.tracer_pid = tracer_pid;
}

// The checks of the leading fields; an empty string when they hold. `what` names the area in
// the reasons ("jump area"); `checksum`: the header's checksum as the reader recomputes it.
template <typename Header>
std::string check_identity(const Header& h, const char (&magic)[8], std::uint32_t version,
                           std::uint64_t checksum, RuntimeAddr mapped_at, const std::string& what) {
  if (std::memcmp(h.magic, magic, sizeof h.magic) != 0) return "no probecost " + what + " magic";
  if (h.version != version)
    return what + " version " + std::to_string(h.version) + ", this probecost reads version " +
           std::to_string(version);
  if (h.header_size != sizeof(Header)) return what + " header of an unexpected size";
  if (h.checksum != checksum) return what + " header checksum mismatch";
  if (h.area_address != mapped_at.value())
    return what + " says it is mapped at " + RuntimeAddr(h.area_address).hex() + ", found at " +
           mapped_at.hex();
  return {};
}

}  // namespace probecost::area
