#include "breakpoint/jump/exit_plan.hpp"

#include <Zydis/Zydis.h>

#include <algorithm>
#include <map>

#include "breakpoint/x86/relocate.hpp"

namespace probecost {

namespace {

using Flow = Instruction::Flow;
using Insns = std::vector<Instruction>;

std::string at(const Instruction& in) {
  return in.quoted() + " at " + in.address.hex();
}

// Every direct branch of the function to a place inside it, by target: a target is where a
// thread can arrive other than by falling through.
std::multimap<std::uint64_t, const Instruction*> branches_in(const Insns& insns, RuntimeAddr begin,
                                                             RuntimeAddr end) {
  std::multimap<std::uint64_t, const Instruction*> out;
  for (const auto& in : insns) {
    if (in.relative_branch && in.target >= begin && in.target < end)
      out.emplace(in.target.value(), &in);
  }
  return out;
}

struct Function {
  const Insns& insns;
  RuntimeAddr begin, end;
  std::multimap<std::uint64_t, const Instruction*> targets;

  std::string why_entered(const Instruction& in) const {
    auto it = targets.find(in.address.value());
    if (it == targets.end()) return {};
    return at(*it->second) + " branches to " + in.address.hex();
  }
};

// Why `in` may not run before an exit in its patch: the range is a straight line of code that
// can run from a copy.
std::string why_not_before_exit(const Instruction& in) {
  if (in.flow != Flow::Sequential) return at(in) + " leaves the straight line";
  std::string why = why_not_relocatable(in);
  return why.empty() ? why : why + " (at " + in.address.hex() + ")";
}

// The first instruction of a patch that ends with insns[k] and covers 5 bytes or more, growing
// backwards; nothing, with `why`, when the straight line before the exit is too short.
std::optional<std::size_t> exit_range(const Function& f, std::size_t k, std::string& why) {
  std::size_t s = k;
  std::int64_t length = f.insns[k].length;
  while (length < static_cast<std::int64_t>(kJumpLength)) {
    if (s == 0) {
      why = "the function starts " + std::to_string(length) + " bytes before the end of " +
            at(f.insns[k]) + "; a jump needs " + std::to_string(kJumpLength);
      return std::nullopt;
    }
    if (why = f.why_entered(f.insns[s]); !why.empty()) {
      why += ", inside the bytes a jump over " + at(f.insns[k]) + " would replace";
      return std::nullopt;
    }
    --s;
    if (why = why_not_before_exit(f.insns[s]); !why.empty()) {
      why = "a jump over " + at(f.insns[k]) + " would cover " + why;
      return std::nullopt;
    }
    length += f.insns[s].length;
  }
  if (length > static_cast<std::int64_t>(kMaxPatchLength)) {
    why = "a jump over " + at(f.insns[k]) + " would replace " + std::to_string(length) +
          " bytes; at most " + std::to_string(kMaxPatchLength) + " are kept";
    return std::nullopt;
  }
  return s;
}

JumpPlan plan_of(const Function& f, std::span<const std::uint8_t> code, std::size_t s,
                 std::size_t k, PlanRole role) {
  JumpPlan p;
  p.role = role;
  p.function = f.begin;
  p.site = f.insns[s].address;
  p.covered.assign(f.insns.begin() + static_cast<std::ptrdiff_t>(s),
                   f.insns.begin() + static_cast<std::ptrdiff_t>(k) + 1);
  p.length = static_cast<std::size_t>(f.insns[k].next() - p.site);
  std::copy_n(code.begin() + (p.site - f.begin), p.length, p.original.begin());
  return p;
}

// The whole function up to its exit insns[k] as one patch: nothing, with `why`, unless it is a
// straight line that nothing enters after its first byte.
std::optional<JumpPlan> whole(const Function& f, std::span<const std::uint8_t> code, std::size_t k,
                              std::string& why) {
  std::int64_t length = f.insns[k].next() - f.begin;
  if (length > static_cast<std::int64_t>(kMaxPatchLength)) {
    why = "the function's first exit, " + at(f.insns[k]) + ", is too far for one patch";
    return std::nullopt;
  }
  // A `ret` alone, a getter, a 2-byte tail jmp: a 5-byte jump would overwrite whatever follows
  // the function (the next function, the next page, another mapping or none).
  if (length < static_cast<std::int64_t>(kJumpLength)) {
    why = "the function ends " + std::to_string(length) + " bytes after its start, at the end of " +
          at(f.insns[k]) + "; a jump needs " + std::to_string(kJumpLength);
    return std::nullopt;
  }
  for (std::size_t i = 0; i <= k; ++i) {
    if (i < k && !(why = why_not_before_exit(f.insns[i])).empty()) return std::nullopt;
    if (i > 0 && !(why = f.why_entered(f.insns[i])).empty()) return std::nullopt;
  }
  return plan_of(f, code, 0, k, PlanRole::Call);
}

void add_int3_exit(CallPlans& out, const Instruction& exit, std::string why) {
  out.int3_exits.push_back({exit, std::move(why)});
}

// The entry's patch covers `entry_end` bytes: an exit whose patch would reach into it (or that
// is inside it) shares the entry's patch if the function can be patched whole up to it.
void plan_exit(const Function& f, std::span<const std::uint8_t> code, std::size_t k,
               CallPlans& out) {
  const Instruction& exit = f.insns[k];
  if (out.entry && out.entry->role == PlanRole::Call && exit.address < out.entry->end()) return;
  std::string why;
  auto s = exit_range(f, k, why);
  bool inside = out.entry && exit.address < out.entry->end();
  bool overlaps = out.entry && s && f.insns[*s].address < out.entry->end();
  if ((inside || overlaps) && out.entry->role == PlanRole::Entry) {
    std::string no;
    if (auto w = whole(f, code, k, no)) {
      out.entry = std::move(*w);
      return;
    }
    if (inside) {
      // Inside the entry's patch a thread never reaches the exit: both are int3.
      out.why_no_entry =
          "the function's exit " + at(exit) + " is inside the entry's patch (" + no + ")";
      out.entry.reset();
      return add_int3_exit(out, exit, out.why_no_entry);
    }
    why = "the jump over " + at(exit) + " would overlap the entry's (" + no + ")";
  }
  if (s && !out.entry && *s == 0) {
    why = "the jump over " + at(exit) + " would cover the function's entry, an int3";
    return add_int3_exit(out, exit, why);
  }
  if (!s || overlaps) return add_int3_exit(out, exit, why);
  out.exits.push_back(plan_of(f, code, *s, k, PlanRole::Exit));
}

}  // namespace

bool is_exit(const Instruction& in, RuntimeAddr function, RuntimeAddr end, const OwnPart& own_part,
             const FrameKept& frame_kept) {
  auto leaves = [&](RuntimeAddr to) {
    if (frame_kept && frame_kept(in.address)) return false;
    if (to == function) return true;
    return (to < function || to >= end) && !(own_part && own_part(to));
  };
  switch (in.flow) {
    case Flow::Return:
      return in.mnemonic == ZYDIS_MNEMONIC_RET;
    case Flow::RelJump:
    case Flow::RelCondJump:
      return leaves(in.target);
    case Flow::IndirectJump:
      // Through a fixed slot: a tail call. Through a register or a table: one when its target,
      // known at run time only, is outside (an int3 serves it and looks).
      return (in.rip_relative || in.target_operand) && !(frame_kept && frame_kept(in.address));
    default:
      return false;
  }
}

CallPlans plan_calls(RuntimeAddr function, std::span<const std::uint8_t> code,
                     const OwnPart& own_part, const FrameKept& frame_kept) {
  CallPlans out;
  auto insns = decode_function(function, code, out.undecodable);
  if (!insns) return out;
  RuntimeAddr end = function + static_cast<std::int64_t>(code.size());
  Function f{*insns, function, end, branches_in(*insns, function, end)};
  out.entry = plan_jump(function, code, function, out.why_no_entry);
  std::string indirect = why_indirect_jump(*insns);
  for (const auto& in : *insns) {
    if (in.flow == Flow::IndirectJump && !in.rip_relative && !in.target_operand)
      out.unseen_exits.push_back(in);
  }
  auto first_exit = std::find_if(insns->begin(), insns->end(), [&](const Instruction& in) {
    return is_exit(in, function, end, own_part, frame_kept);
  });
  if (!out.entry && indirect.empty() && first_exit != insns->end()) {
    // plan_jump refuses an entry patch with a ret in it: a short function may be patched whole.
    std::string no;
    if ((out.entry = whole(f, code, static_cast<std::size_t>(first_exit - insns->begin()), no)))
      out.why_no_entry.clear();
  }
  for (std::size_t k = 0; k < insns->size(); ++k) {
    const Instruction& in = (*insns)[k];
    if (!is_exit(in, function, end, own_part, frame_kept)) continue;
    if (!indirect.empty()) {
      add_int3_exit(out, in, indirect);
    } else {
      plan_exit(f, code, k, out);
    }
  }
  return out;
}

}  // namespace probecost
