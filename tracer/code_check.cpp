// Which code our bytes went into, and leaving alone what is no longer that code (see
// code_identity.hpp).
#include "common/error.hpp"
#include "tracer/process.hpp"

namespace probecost {

void TracedProcess::note_code() {
  std::optional<std::vector<Mapping>> maps;
  auto note = [&](RuntimeAddr at) {
    if (code_.count(at)) return;
    if (!maps) maps = read_maps(proc_tid());
    if (auto id = code_identity(*maps, at)) code_.emplace(at, *id);
  };
  for (const auto& s : sites_) {
    if (s->enabled()) note(s->address());
  }
  for (const auto& p : patches_) {
    if (p->installed()) note(p->address());
  }
}

std::vector<LeftAlone> TracedProcess::forget_moved_code() {
  std::vector<LeftAlone> out;
  if (code_.empty()) return out;
  auto maps = read_maps(proc_tid());
  // Empty when the bytes may go back; the bytes read where something is still mapped.
  auto why = [&](RuntimeAddr at, std::span<const std::uint8_t> ours) -> std::string {
    auto then = code_.find(at);
    if (then == code_.end()) return {};
    std::vector<std::uint8_t> now(ours.size());
    if (code_identity(maps, at)) {
      try {
        memory_.read(at, now);
      } catch (const Error&) {
        now.clear();
      }
    }
    return why_not_ours(then->second, maps, at, ours, now);
  };
  const std::uint8_t int3[] = {kInt3};
  for (const auto& s : sites_) {
    if (!s->enabled()) continue;
    std::string w = why(s->address(), int3);
    if (w.empty()) continue;
    s->forget();
    code_.erase(s->address());
    out.push_back({s->address(), s->label(), w});
  }
  for (const auto& p : patches_) {
    if (!p->installed()) continue;
    std::string w = why(p->address(), p->patch().patch_bytes());
    if (w.empty()) continue;
    p->forget();
    code_.erase(p->address());
    out.push_back({p->address(), p->label(), w});
  }
  return out;
}

}  // namespace probecost
