#include "tracer/os/code_identity.hpp"

#include <algorithm>

namespace probecost {

std::optional<CodeIdentity> code_identity(const std::vector<Mapping>& maps, RuntimeAddr at) {
  for (const auto& m : maps) {
    if (m.contains(at))
      return CodeIdentity{m.file_id, static_cast<std::uint64_t>(at - m.start) + m.offset, m.path};
  }
  return std::nullopt;
}

std::string why_not_ours(const CodeIdentity& then, const std::vector<Mapping>& maps, RuntimeAddr at,
                         std::span<const std::uint8_t> ours, std::span<const std::uint8_t> now) {
  auto id = code_identity(maps, at);
  std::string was = then.path.empty() ? then.file_id : then.path;
  if (!id) return "nothing is mapped there any more (" + was + " was unmapped: dlclose?)";
  if (!(*id == then)) {
    std::string is = id->path.empty() ? id->file_id : id->path;
    return "another mapping is there now (" + is + " where " + was + " was: dlclose, then dlopen)";
  }
  if (!std::equal(ours.begin(), ours.end(), now.begin(), now.end())) {
    return "the bytes there are no longer the ones probecost wrote";
  }
  return {};
}

}  // namespace probecost
