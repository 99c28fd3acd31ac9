#include "breakpoint/int3/outline.hpp"

#include <limits>

#include "breakpoint/x86/relocate.hpp"
#include "common/error.hpp"

namespace probecost {

namespace {

bool fits_int32(std::int64_t v) {
  return v >= std::numeric_limits<std::int32_t>::min() &&
         v <= std::numeric_limits<std::int32_t>::max();
}

}  // namespace

std::vector<std::uint8_t> relocate(const Instruction& in, RuntimeAddr at, std::string& why) {
  auto copy = relocate_block({&in, 1}, at, why);
  return copy ? std::move(copy->bytes) : std::vector<std::uint8_t>{};
}

std::optional<RuntimeAddr> Outliner::place(const Instruction& in, std::string& why, bool& later) {
  later = false;
  auto in_reach = [&](RuntimeAddr page) {
    return fits_int32(page - in.address) && fits_int32(in.address - (page + kPageSize));
  };
  if (!refused_.empty()) {
    why = refused_;
    return std::nullopt;
  }
  if (used_ + kSlotSize > kPageSize || pages_.empty() || !in_reach(pages_.back())) {
    std::optional<RuntimeAddr> page;
    try {
      page = mapper_(in.address);
    } catch (const Error& e) {
      // The process refused the mapping (EPERM from a seccomp filter, ENOMEM): it will refuse
      // the next one too, and every site does without a copy.
      refused_ = why = std::string("no scratch page: ") + e.what();
      return std::nullopt;
    }
    if (!page) {
      later = true;
      return std::nullopt;
    }
    pages_.push_back(*page);
    used_ = sizeof(ScratchHeader);
  }
  RuntimeAddr slot = pages_.back() + static_cast<std::int64_t>(used_);
  auto copy = relocate_block({&in, 1}, slot, why);
  if (!copy) return std::nullopt;
  memory_->write(slot, copy->bytes);
  if (copies_) {
    copies_->add(slot, in.address);
    copies_->add_jump_back(slot + static_cast<std::int64_t>(*copy->jump_back), in.next());
  }
  used_ += kSlotSize;
  return slot;
}

}  // namespace probecost
