#pragma once
// Where relocated copies of a tracee's instructions run: the out-of-line copies of the int3
// step-over (one instruction each, in a scratch page) and the instructions a jump displaces (in
// its trampoline). Each copy stands for one original instruction. A fault the copy raises must
// reach the program as the original's (tracer/core/fault_fixup.hpp), and a thread sent back to a
// displaced original, inside a jump's patched bytes, must continue in its copy.
#include <cstdint>
#include <map>
#include <optional>

#include "common/address.hpp"

namespace probecost {

class CopyMap {
 public:
  // The instruction at `original` runs from `copy` too.
  void add(RuntimeAddr copy, RuntimeAddr original);
  // The original of the copy that starts at `pc` (a fault's RIP is at the instruction that
  // faulted, not inside it); nothing for any other address.
  std::optional<RuntimeAddr> original_of(RuntimeAddr pc) const;
  // The copy's jump back, at `at`, goes on at `target` (the instruction after the original(s)).
  void add_jump_back(RuntimeAddr at, RuntimeAddr target);
  // Where a thread whose RIP (or a signal frame's saved RIP) is `pc` does exactly the same in
  // the program's own code: the original of a copy that starts at `pc`, the target of a jump
  // back at `pc`. A copy runs on the program's registers, stack and flags, so nothing but RIP
  // differs at these points. Nothing for any other address (the trampoline's own code).
  std::optional<RuntimeAddr> in_original(RuntimeAddr pc) const;
  // The copy of the instruction at `original`: the newest, if it was copied more than once.
  std::optional<RuntimeAddr> copy_of(RuntimeAddr original) const;
  bool empty() const { return to_original_.empty() && jump_backs_.empty(); }
  // The address space is gone (exec): so are the copies.
  void clear();

 private:
  std::map<std::uint64_t, std::uint64_t> to_original_, to_copy_, jump_backs_;
};

}  // namespace probecost
