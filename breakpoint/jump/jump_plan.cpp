#include "breakpoint/jump/jump_plan.hpp"

#include <algorithm>

#include "breakpoint/x86/relocate.hpp"

namespace probecost {

namespace {

using Flow = Instruction::Flow;

std::string at(const Instruction& in) {
  return in.quoted() + " at " + in.address.hex();
}

// Why `in`, in the patched range, cannot run from the trampoline; empty if it can.
std::string why_not_in_range(const Instruction& in) {
  switch (in.flow) {
    case Flow::Return:
      return at(in) + " returns inside the patched range";
    case Flow::SystemCall:
      return at(in) +
             " is a system call: the kernel, signal handlers, seccomp and a restarted call "
             "would see the trampoline's address";
    case Flow::Interrupt:
      return at(in) +
             " raises a trap (perhaps another tool's breakpoint), which would report the "
             "trampoline's address";
    case Flow::FarBranch:
      return at(in) + " is a far branch";
    case Flow::IndirectJump:
      if (!in.rip_relative) return at(in) + " is an indirect jump";
      break;
    default:
      break;
  }
  std::string why = why_not_relocatable(in);
  return why.empty() ? why : why + " (at " + in.address.hex() + ")";
}

// Whole instructions from `first` covering kJumpLength bytes: their count, or 0 with `why`.
std::size_t cover(const std::vector<Instruction>& function, std::size_t first, RuntimeAddr end,
                  std::string& why) {
  RuntimeAddr site = function[first].address;
  if (end - site < static_cast<std::int64_t>(kJumpLength)) {
    why = "the function ends " + std::to_string(end - site) +
          " bytes after the site; a jump needs " + std::to_string(kJumpLength);
    return 0;
  }
  std::size_t i = first;
  for (; i < function.size() && function[i].address - site < static_cast<std::int64_t>(kJumpLength);
       ++i) {
    if (why = why_not_in_range(function[i]); !why.empty()) return 0;
  }
  std::int64_t length = function[i - 1].next() - site;
  if (length > static_cast<std::int64_t>(kMaxPatchLength)) {
    why = "the instructions the jump would replace take " + std::to_string(length) +
          " bytes; at most " + std::to_string(kMaxPatchLength) + " are kept";
    return 0;
  }
  return i - first;
}

// A direct branch to a byte of [site+1, end). One from inside the range to an instruction of the
// range is fine: relocate_block() sends it to that instruction's copy.
std::string why_branch_into(const std::vector<Instruction>& function, RuntimeAddr site,
                            RuntimeAddr end) {
  auto is_start = [&](RuntimeAddr a) {
    return std::any_of(function.begin(), function.end(),
                       [&](const Instruction& in) { return in.address == a; });
  };
  for (const auto& in : function) {
    if (!in.relative_branch || in.target <= site || in.target >= end) continue;
    bool inside = in.address >= site && in.address < end;
    if (inside && in.flow != Flow::RelCall && is_start(in.target)) continue;
    return at(in) + " branches to " + in.target.hex() + ", inside the " +
           std::to_string(end - site) + " bytes the jump would replace";
  }
  return {};
}

}  // namespace

// A jump through a fixed RIP-relative slot (`jmp *foo@GOTPCREL(%rip)`, a tail call with -fno-plt)
// goes to one function's entry, not into a table; any other indirect jump may be a jump table.
std::string why_indirect_jump(const std::vector<Instruction>& function) {
  for (const auto& in : function) {
    if (in.flow == Flow::IndirectJump && !in.rip_relative) {
      return "the function has an indirect jump (" + at(in) +
             "), perhaps through a jump table whose targets cannot be known: one could be inside "
             "the patched range";
    }
  }
  return {};
}

std::optional<std::vector<Instruction>> decode_function(RuntimeAddr function,
                                                        std::span<const std::uint8_t> code,
                                                        std::string& why) {
  std::vector<Instruction> out;
  for (std::size_t off = 0; off < code.size();) {
    auto in = decode(code.subspan(off, std::min<std::size_t>(15, code.size() - off)),
                     function + static_cast<std::int64_t>(off));
    if (!in) {
      why = "the bytes at " + (function + static_cast<std::int64_t>(off)).hex() +
            " do not decode as an x86-64 instruction";
      return std::nullopt;
    }
    out.push_back(*in);
    off += in->length;
  }
  return out;
}

std::string why_malformed(const JumpPlan& plan) {
  if (plan.length < kJumpLength || plan.length > kMaxPatchLength) {
    return "it patches " + std::to_string(plan.length) + " bytes; a jump needs " +
           std::to_string(kJumpLength) + " to " + std::to_string(kMaxPatchLength);
  }
  RuntimeAddr next = plan.site;
  for (const auto& in : plan.covered) {
    if (in.address != next || in.length == 0 || next + in.length > plan.end())
      return "its instruction at " + in.address.hex() + " is not the next of its bytes";
    auto off = static_cast<std::size_t>(next - plan.site);
    if (!std::equal(in.bytes.begin(), in.bytes.begin() + in.length, plan.original.begin() + off))
      return "its saved bytes are not those of its instruction at " + in.address.hex();
    next = in.next();
  }
  if (next != plan.end()) {
    return "its instructions cover " + std::to_string(next - plan.site) + " bytes, not its " +
           std::to_string(plan.length);
  }
  return {};
}

std::optional<JumpPlan> plan_jump(RuntimeAddr function, std::span<const std::uint8_t> code,
                                  RuntimeAddr site, std::string& why) {
  RuntimeAddr end = function + static_cast<std::int64_t>(code.size());
  if (site < function || site >= end) {
    why = "the site " + site.hex() + " is outside the function [" + function.hex() + ", " +
          end.hex() + ")";
    return std::nullopt;
  }
  auto insns = decode_function(function, code, why);
  if (!insns) return std::nullopt;
  auto first = std::find_if(insns->begin(), insns->end(),
                            [&](const Instruction& in) { return in.address >= site; });
  if (first == insns->end() || first->address != site) {
    why = "the site " + site.hex() + " is not at an instruction boundary (decoding from " +
          function.hex() + ")";
    return std::nullopt;
  }
  std::size_t index = static_cast<std::size_t>(first - insns->begin());
  if (why = why_indirect_jump(*insns); !why.empty()) return std::nullopt;
  std::size_t count = cover(*insns, index, end, why);
  if (!count) return std::nullopt;

  JumpPlan plan;
  plan.function = function;
  plan.site = site;
  plan.covered.assign(first, first + static_cast<std::ptrdiff_t>(count));
  plan.length = static_cast<std::size_t>(plan.covered.back().next() - site);
  if (why = why_branch_into(*insns, site, plan.end()); !why.empty()) return std::nullopt;
  std::copy_n(code.begin() + (site - function), plan.length, plan.original.begin());
  return plan;
}

}  // namespace probecost
