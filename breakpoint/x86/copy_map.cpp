#include "breakpoint/x86/copy_map.hpp"

namespace probecost {

void CopyMap::add(RuntimeAddr copy, RuntimeAddr original) {
  to_original_[copy.value()] = original.value();
  to_copy_[original.value()] = copy.value();
}

std::optional<RuntimeAddr> CopyMap::original_of(RuntimeAddr pc) const {
  auto it = to_original_.find(pc.value());
  if (it == to_original_.end()) return std::nullopt;
  return RuntimeAddr(it->second);
}

void CopyMap::add_jump_back(RuntimeAddr at, RuntimeAddr target) {
  jump_backs_[at.value()] = target.value();
}

std::optional<RuntimeAddr> CopyMap::in_original(RuntimeAddr pc) const {
  if (auto original = original_of(pc)) return original;
  auto it = jump_backs_.find(pc.value());
  if (it == jump_backs_.end()) return std::nullopt;
  return RuntimeAddr(it->second);
}

std::optional<RuntimeAddr> CopyMap::copy_of(RuntimeAddr original) const {
  auto it = to_copy_.find(original.value());
  if (it == to_copy_.end()) return std::nullopt;
  return RuntimeAddr(it->second);
}

void CopyMap::clear() {
  to_original_.clear();
  to_copy_.clear();
  jump_backs_.clear();
}

}  // namespace probecost
