#include "tracer/symbols/ifunc.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "common/error.hpp"
#include "tracer/symbols/dwfl_modules.hpp"

namespace probecost {

namespace {

// A value read from a slot is the implementation when it is in the defining module, outside
// the referencing module's PLT (a lazy JUMP_SLOT not bound yet points back there), not the
// resolver, and not another definition of the same name (the compat memcpy@GLIBC_2.2.5 that
// an old program's slot is bound to).
bool plausible(std::uint64_t value, const IfuncSlot& slot, const Symbol& ifunc,
               const ProcessSymbols& symbols) {
  RuntimeAddr v(value);
  if (!value || v == ifunc.address || symbols.module_at(v) != ifunc.module) return false;
  for (const auto& [start, end] : slot.plt) {
    if (v >= start && v < end) return false;
  }
  auto names = symbols.names_at(v);
  return std::find(names.begin(), names.end(), without_version(ifunc.name)) == names.end();
}

// The implementation's name: one that contains the symbol's (memcpy ->
// __memcpy_avx_unaligned_erms rather than its alias __memmove_avx_unaligned_erms).
std::string implementation_name(RuntimeAddr at, const Symbol& ifunc,
                                const ProcessSymbols& symbols) {
  auto names = symbols.names_at(at);
  if (names.empty()) return "";
  auto it = std::find_if(names.begin(), names.end(), [&](const std::string& n) {
    return n.find(without_version(ifunc.name)) != std::string::npos;
  });
  return it != names.end() ? *it : names.front();
}

}  // namespace

IfuncTarget resolve_ifunc(const Symbol& ifunc, const ProcessSymbols& symbols, TraceeMemory& memory,
                          const ResolverCall& call, pid_t pid) {
  IfuncTarget t;
  for (const auto& slot : symbols.ifunc_slots(ifunc)) {
    std::array<std::uint8_t, 8> bytes{};
    try {
      memory.read(slot.slot, bytes);
    } catch (const Error&) {
      continue;  // a slot in a page we cannot read: look at the next
    }
    std::uint64_t value = 0;
    std::memcpy(&value, bytes.data(), sizeof value);
    if (!plausible(value, slot, ifunc, symbols)) continue;
    t.address = RuntimeAddr(value);
    t.resolved_by = slot.kind + " slot " + slot.slot.hex() + " of " + base_name(slot.module);
    t.name = implementation_name(t.address, ifunc, symbols);
    return t;
  }
  std::string what = "IFUNC " + without_version(ifunc.name) + " (resolver at " +
                     ifunc.address.hex() + " in " + base_name(ifunc.module) + ") of process " +
                     std::to_string(pid);
  if (!call) throw Error("cannot resolve " + what + ": no relocated slot holds it");
  auto value = call(ifunc.address);
  if (!value) throw Error("cannot resolve " + what + ": no thread can run its resolver now");
  if (!*value) throw Error("cannot resolve " + what + ": its resolver returned 0");
  t.address = RuntimeAddr(*value);
  t.resolved_by = "its resolver, called in the process";
  t.name = implementation_name(t.address, ifunc, symbols);
  return t;
}

}  // namespace probecost
