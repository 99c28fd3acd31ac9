#pragma once
// Direct branches from anywhere in a module into a range: what a jump patch must also rule out.
//
// plan_jump decodes the containing function, which is all optprobes can do for kernel code it
// has no other knowledge of. A user-space library has more: glibc's hand-written string
// functions jump between each other's bodies (__mempcpy_avx_unaligned_erms enters
// __memmove_avx_unaligned_erms after its first instruction), and those bodies often have no
// symbol at all in a stripped libc. So the module's whole executable text is decoded by linear
// sweep (x86 code compiled or assembled into .text resynchronises within a few instructions;
// tables live in .rodata), and every relative jmp, jcc and call is indexed by its target. A
// false target can only make us refuse a site, never accept one.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "common/address.hpp"

namespace probecost {

class BranchIndex {
 public:
  // `code` is at `base` in the file's addresses (p_vaddr); may be called for several pieces of
  // one module.
  void add(std::span<const std::uint8_t> code, FileAddr base);
  // Sources of direct branches whose target is in [lo, hi), except those from inside
  // [skip_lo, skip_hi).
  std::vector<FileAddr> into(FileAddr lo, FileAddr hi, FileAddr skip_lo, FileAddr skip_hi) const;
  std::size_t size() const { return by_target_.size(); }
  // Sorts the index now (else the first into() does, in the middle of an attach).
  void sort() const;
  // Every (target, source), sorted by target; and an index made of such a list (the on-disk
  // cache of tracer/jump/branch_cache).
  using Pair = std::pair<std::uint64_t, std::uint64_t>;
  const std::vector<Pair>& pairs() const {
    sort();
    return by_target_;
  }
  static BranchIndex of_sorted(std::vector<Pair> pairs);

 private:
  // (target, source), sorted by target once the pieces are in.
  mutable std::vector<std::pair<std::uint64_t, std::uint64_t>> by_target_;
  mutable bool sorted_ = true;
};

}  // namespace probecost
