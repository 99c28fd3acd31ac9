#pragma once
// The dynamic linker's report of its link map, as gdb follows it (<link.h>'s struct r_debug):
// ld.so's _r_debug says where the map is and r_brk, a function (_dl_debug_state, a bare `ret`)
// that ld.so calls before it changes the map (r_state RT_ADD or RT_DELETE) and again once the
// map is consistent (RT_CONSISTENT). A breakpoint on r_brk is told of every dlopen and dlclose:
// at RT_CONSISTENT after a dlopen the new library is mapped (not yet relocated, its
// constructors not yet run), after a dlclose it is unmapped.
#include <optional>

#include "breakpoint/x86/tracee_memory.hpp"
#include "common/address.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

class LinkMapWatch {
 public:
  // Nothing for a process without a dynamic linker (a static executable), or one whose
  // r_debug is not set up yet.
  static std::optional<LinkMapWatch> find(const ProcessSymbols& symbols, TraceeMemory& memory);
  RuntimeAddr brk() const { return brk_; }
  // r_state is RT_CONSISTENT: the map (and the mappings) are what they will stay until the next
  // call. False too when it cannot be read.
  bool consistent(TraceeMemory& memory) const;

 private:
  LinkMapWatch(RuntimeAddr r_debug, RuntimeAddr brk) : r_debug_(r_debug), brk_(brk) {}
  RuntimeAddr r_debug_, brk_;
};

}  // namespace probecost
