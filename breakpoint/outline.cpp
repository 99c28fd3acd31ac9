#include "breakpoint/outline.hpp"

#include <cstring>
#include <limits>

#include "breakpoint/error.hpp"

namespace probecost {

namespace {

bool fits_int32(std::int64_t v) {
  return v >= std::numeric_limits<std::int32_t>::min() &&
         v <= std::numeric_limits<std::int32_t>::max();
}

void put32(std::vector<std::uint8_t>& out, std::size_t at, std::int32_t v) {
  std::memcpy(out.data() + at, &v, 4);
}

// jmp rel32 when in reach, else jmp *0(%rip) followed by the 8-byte target.
void append_jump(std::vector<std::uint8_t>& out, RuntimeAddr at, RuntimeAddr target) {
  std::int64_t rel = target - (at + static_cast<std::int64_t>(out.size()) + 5);
  if (fits_int32(rel)) {
    out.push_back(0xe9);
    out.resize(out.size() + 4);
    put32(out, out.size() - 4, static_cast<std::int32_t>(rel));
    return;
  }
  const std::uint8_t jmp_abs[] = {0xff, 0x25, 0, 0, 0, 0};
  out.insert(out.end(), std::begin(jmp_abs), std::end(jmp_abs));
  std::uint64_t t = target.value();
  out.insert(out.end(), reinterpret_cast<std::uint8_t*>(&t),
             reinterpret_cast<std::uint8_t*>(&t) + 8);
}

}  // namespace

std::vector<std::uint8_t> relocate(const Instruction& in, RuntimeAddr at, std::string& why) {
  using K = Instruction::Kind;
  std::vector<std::uint8_t> out;
  if (in.kind == K::CallRel) {
    why = "a call pushes its own address, which would point into the scratch page";
    return {};
  }
  if (in.relative_branch) {
    if (in.kind != K::JmpRel && in.kind != K::Jcc) {
      why = "'" + in.text + "' has a relative target with no 32-bit form (loop/jrcxz)";
      return {};
    }
    // Re-encode as the rel32 form, whatever the original width.
    if (in.kind == K::JmpRel) {
      out = {0xe9, 0, 0, 0, 0};
    } else {
      out = {0x0f, static_cast<std::uint8_t>(0x80 | in.condition), 0, 0, 0, 0};
    }
    std::int64_t rel = in.target - (at + static_cast<std::int64_t>(out.size()));
    if (!fits_int32(rel)) {
      why = "branch target out of reach of the scratch page";
      return {};
    }
    put32(out, out.size() - 4, static_cast<std::int32_t>(rel));
  } else {
    out.assign(in.bytes.begin(), in.bytes.begin() + in.length);
    if (in.rip_relative) {
      if (in.disp_size != 4) {
        why = "RIP-relative operand without a 32-bit displacement";
        return {};
      }
      // disp' = disp + (old next) - (new next): the operand keeps pointing at the same byte.
      std::int32_t disp;
      std::memcpy(&disp, in.bytes.data() + in.disp_offset, 4);
      std::int64_t moved = disp + (in.next() - (at + in.length));
      if (!fits_int32(moved)) {
        why = "RIP-relative operand out of reach of the scratch page (more than 2 GiB away)";
        return {};
      }
      put32(out, in.disp_offset, static_cast<std::int32_t>(moved));
    }
  }
  append_jump(out, at, in.next());
  return out;
}

std::optional<RuntimeAddr> Outliner::place(const Instruction& in, std::string& why, bool& later) {
  later = false;
  auto in_reach = [&](RuntimeAddr page) {
    return fits_int32(page - in.address) && fits_int32(in.address - (page + kPageSize));
  };
  if (used_ + kSlotSize > kPageSize || pages_.empty() || !in_reach(pages_.back())) {
    auto page = mapper_(in.address);
    if (!page) {
      later = true;
      return std::nullopt;
    }
    pages_.push_back(*page);
    used_ = 0;
  }
  RuntimeAddr slot = pages_.back() + static_cast<std::int64_t>(used_);
  auto bytes = relocate(in, slot, why);
  if (bytes.empty()) return std::nullopt;
  memory_->write(slot, bytes);
  used_ += kSlotSize;
  return slot;
}

}  // namespace probecost
