#pragma once
// The unwind rules of a module's CFI, computed once per pc from libdw and kept (as framehop and
// perf's DWARF unwinders keep theirs): unwinding a frame whose rule is cached is a hash lookup
// and reads from the copied stack, where libdw's walk finds the FDE, runs the CIE's and the FDE's
// instructions up to the pc, and evaluates each register's rule as a DWARF expression, for every
// frame of every stack (~400 ns a frame).
//
// Only the rules whose result is provably libdw's are cached: the CFA a register plus a
// constant (DW_CFA_def_cfa), every register undefined, the same value, saved at CFA+N, or the
// value CFA+N. A frame whose rule is anything else (a DWARF expression, as in PLT entries; a
// register copied from another; a signal frame's CIE; no FDE at all, where libdw falls back to
// the frame pointer) is libdw's to unwind: the cache says so (nullptr) and SnapshotUnwinder
// hands the walk over to libdw from that frame on. apply() does what libdw 0.188's handle_cfi
// (libdwfl/frame_unwind.c) does with such a rule, step for step, including its quirks: the
// registers are read from the rule of each of the 17 (x86-64 DWARF 0-16, 16 the return
// address), an unset register stays unset, a read that fails leaves its register unset.
#include <elfutils/libdwfl.h>

#include <cstdint>
#include <unordered_map>

namespace probecost {

// A frame's registers as libdw's unwinder holds them: each known or not.
struct FrameRegs {
  static constexpr unsigned kCount = 17;  // ebl_frame_nregs on x86-64
  static constexpr unsigned kReturn = 16;
  std::uint64_t value[kCount] = {};
  std::uint32_t known = 0;  // bit r: value[r] is known
  bool has(unsigned r) const { return (known >> r) & 1; }
  void put(unsigned r, std::uint64_t v) {
    value[r] = v;
    known |= 1u << r;
  }
};

// A simple rule, as what it does to each register that is not left undefined (ascending).
struct UnwindRule {
  enum Kind : std::uint8_t { Same, Saved, Value };  // Saved at CFA+N, Value CFA+N
  struct Action {
    std::uint8_t reg;
    Kind kind;
    std::int32_t offset;
  };
  std::uint8_t cfa_reg = 0;
  std::uint8_t actions = 0;
  bool return_undefined = false;  // an undefined return address: the outermost frame
  std::uint64_t cfa_offset = 0;   // added modulo 2^64, as libdw adds it
  Action action[FrameRegs::kCount] = {};
};

class UnwindRules {
 public:
  // The rule at `pc` (a frame's pc, less 1 for a return address, as libdw looks it up) in the
  // modules of `dwfl`, or nullptr when it is not one of the simple ones.
  const UnwindRule* find(Dwfl* dwfl, std::uint64_t pc);
  // The modules changed: nothing cached holds.
  void clear() { rules_.clear(); }
  std::size_t size() const { return rules_.size(); }

  // Unwinds one frame by `rule`: `caller` gets the caller's registers; false when the return
  // address is undefined, unknown or 0 (the walk's end, as libdw's PC_UNDEFINED). `read(addr,
  // &word)` reads a word of the stack, false when it is not there. handle_cfi's loop: the CFA
  // from the frame's registers (the same for each register that needs it), a Saved register
  // read at CFA+N, and what fails leaves its register unset.
  template <typename Read>
  static bool apply(const UnwindRule& rule, const FrameRegs& frame, FrameRegs& caller,
                    Read&& read) {
    caller.known = 0;
    const bool have_cfa = frame.has(rule.cfa_reg);
    const std::uint64_t cfa = frame.value[rule.cfa_reg] + rule.cfa_offset;
    for (unsigned i = 0; i < rule.actions; ++i) {
      const UnwindRule::Action& a = rule.action[i];
      const std::uint64_t at = cfa + static_cast<std::uint64_t>(std::int64_t{a.offset});
      std::uint64_t word = 0;
      if (a.kind == UnwindRule::Same) {
        if (frame.has(a.reg)) caller.put(a.reg, frame.value[a.reg]);
      } else if (have_cfa && (a.kind == UnwindRule::Value || read(at, &word))) {
        caller.put(a.reg, a.kind == UnwindRule::Value ? at : word);
      }
    }
    return !rule.return_undefined && caller.has(FrameRegs::kReturn) &&
           caller.value[FrameRegs::kReturn] != 0;
  }

 private:
  struct Entry {
    bool simple = false;
    UnwindRule rule;
  };
  static constexpr std::size_t kMaxRules = 1 << 16;  // then it starts again: ~10 MiB at most
  std::unordered_map<std::uint64_t, Entry> rules_;
};

}  // namespace probecost
