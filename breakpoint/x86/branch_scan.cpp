#include "breakpoint/x86/branch_scan.hpp"

#include <Zydis/Zydis.h>

#include <algorithm>

namespace probecost {

void BranchIndex::add(std::span<const std::uint8_t> code, FileAddr base) {
  static const ZydisDecoder decoder = [] {
    ZydisDecoder d;
    ZydisDecoderInit(&d, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    ZydisDecoderEnableMode(&d, ZYDIS_DECODER_MODE_MINIMAL, ZYAN_TRUE);
    return d;
  }();
  std::size_t off = 0;
  while (off < code.size()) {
    ZydisDecodedInstruction zi;
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder, nullptr, code.data() + off,
                                                    code.size() - off, &zi))) {
      ++off;  // not an instruction here (padding, data): resynchronise on the next byte
      continue;
    }
    if ((zi.attributes & ZYDIS_ATTRIB_IS_RELATIVE) && zi.raw.imm[0].is_relative &&
        (zi.meta.category == ZYDIS_CATEGORY_UNCOND_BR ||
         zi.meta.category == ZYDIS_CATEGORY_COND_BR || zi.meta.category == ZYDIS_CATEGORY_CALL)) {
      std::uint64_t source = base.value() + off;
      std::uint64_t target = source + zi.length + static_cast<std::uint64_t>(zi.raw.imm[0].value.s);
      by_target_.emplace_back(target, source);
      sorted_ = false;
    }
    off += zi.length;
  }
}

void BranchIndex::sort() const {
  if (sorted_) return;
  std::sort(by_target_.begin(), by_target_.end());
  sorted_ = true;
}

BranchIndex BranchIndex::of_sorted(std::vector<Pair> pairs) {
  BranchIndex out;
  out.by_target_ = std::move(pairs);
  out.sorted_ = std::is_sorted(out.by_target_.begin(), out.by_target_.end());
  return out;
}

std::vector<FileAddr> BranchIndex::into(FileAddr lo, FileAddr hi, FileAddr skip_lo,
                                        FileAddr skip_hi) const {
  sort();
  std::vector<FileAddr> out;
  auto it = std::lower_bound(by_target_.begin(), by_target_.end(),
                             std::pair<std::uint64_t, std::uint64_t>(lo.value(), 0));
  for (; it != by_target_.end() && it->first < hi.value(); ++it) {
    if (it->second >= skip_lo.value() && it->second < skip_hi.value()) continue;
    out.push_back(FileAddr(it->second));
  }
  return out;
}

}  // namespace probecost
