#include "tracer/symbols/unwind_rules.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>

#include <cstdlib>
#include <optional>

namespace probecost {

namespace {

// The row of the CFI at `pc` as libdw's __libdwfl_frame_unwind finds it: the module's
// .eh_frame first, then its .debug_frame. nullptr: no FDE (libdw then unwinds by the frame
// pointer, ebl_unwind) or no module. The caller frees it.
Dwarf_Frame* row_at(Dwfl* dwfl, std::uint64_t pc) {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl, pc);
  if (!mod) return nullptr;
  Dwarf_Addr bias = 0;
  Dwarf_Frame* frame = nullptr;
  if (Dwarf_CFI* eh = dwfl_module_eh_cfi(mod, &bias))
    if (dwarf_cfi_addrframe(eh, pc - bias, &frame) == 0) return frame;
  if (Dwarf_CFI* dw = dwfl_module_dwarf_cfi(mod, &bias))
    if (dwarf_cfi_addrframe(dw, pc - bias, &frame) == 0) return frame;
  return nullptr;
}

// The CFA as dwarf_frame_cfa gives a DW_CFA_def_cfa rule: one DW_OP_bregx.
bool cfa_of(Dwarf_Frame* frame, UnwindRule& rule) {
  Dwarf_Op* ops = nullptr;
  std::size_t nops = 0;
  if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops != 1 || ops[0].atom != DW_OP_bregx ||
      ops[0].number >= FrameRegs::kCount)
    return false;
  rule.cfa_reg = static_cast<std::uint8_t>(ops[0].number);
  rule.cfa_offset = ops[0].number2;
  return true;
}

// A register's rule as dwarf_frame_register gives it, read the way handle_cfi reads it: no
// operations and ops_mem undefined, no operations and NULL the same value; DW_OP_call_frame_cfa
// [DW_OP_plus_uconst N] [DW_OP_stack_value] saved at CFA+N or (stack_value) the value CFA+N.
bool register_of(Dwarf_Frame* frame, unsigned regno, UnwindRule& rule) {
  Dwarf_Op mem[3], *ops = nullptr;
  std::size_t nops = 0;
  if (dwarf_frame_register(frame, static_cast<int>(regno), mem, &ops, &nops) != 0) return false;
  if (nops == 0) {
    if (ops == mem) {  // undefined
      rule.return_undefined |= regno == FrameRegs::kReturn;
      return true;
    }
    if (ops != nullptr) return false;
    rule.action[rule.actions++] = {static_cast<std::uint8_t>(regno), UnwindRule::Same, 0};
    return true;
  }
  if (ops[0].atom != DW_OP_call_frame_cfa) return false;
  std::size_t at = 1;
  std::uint64_t n = 0;
  if (at < nops && ops[at].atom == DW_OP_plus_uconst) n = ops[at++].number;
  bool value = at < nops && ops[at].atom == DW_OP_stack_value;
  if (value) ++at;
  auto small = static_cast<std::int64_t>(n);
  if (at != nops || small != static_cast<std::int32_t>(small)) return false;
  rule.action[rule.actions++] = {static_cast<std::uint8_t>(regno),
                                 value ? UnwindRule::Value : UnwindRule::Saved,
                                 static_cast<std::int32_t>(small)};
  return true;
}

std::optional<UnwindRule> simple_rule(Dwarf_Frame* frame) {
  Dwarf_Addr start = 0, end = 0;
  bool signal = false;
  if (dwarf_frame_info(frame, &start, &end, &signal) != static_cast<int>(FrameRegs::kReturn) ||
      signal)
    return std::nullopt;
  UnwindRule rule;
  if (!cfa_of(frame, rule)) return std::nullopt;
  for (unsigned r = 0; r < FrameRegs::kCount; ++r)
    if (!register_of(frame, r, rule)) return std::nullopt;
  return rule;
}

}  // namespace

const UnwindRule* UnwindRules::find(Dwfl* dwfl, std::uint64_t pc) {
  auto it = rules_.find(pc);
  if (it == rules_.end()) {
    if (rules_.size() >= kMaxRules) rules_.clear();
    Entry e;
    if (Dwarf_Frame* frame = row_at(dwfl, pc)) {
      auto rule = simple_rule(frame);
      std::free(frame);
      if (rule) e = {true, *rule};
    }
    it = rules_.emplace(pc, e).first;
  }
  return it->second.simple ? &it->second.rule : nullptr;
}

}  // namespace probecost
