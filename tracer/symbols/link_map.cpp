#include "tracer/symbols/link_map.hpp"

#include <link.h>

#include <cstddef>
#include <cstring>

#include "common/error.hpp"

namespace probecost {

namespace {

template <typename T>
std::optional<T> read_field(TraceeMemory& memory, RuntimeAddr at) {
  T value;
  try {
    memory.read(at, {reinterpret_cast<std::uint8_t*>(&value), sizeof value});
  } catch (const Error&) {
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::optional<LinkMapWatch> LinkMapWatch::find(const ProcessSymbols& symbols,
                                               TraceeMemory& memory) {
  // Looked for in the x86-64 dynamic linker first: reading every module's symbol table (a
  // Python's libpython has tens of thousands) would take milliseconds of the attach.
  auto r_debug = symbols.data_symbol("_r_debug", "ld-linux-x86-64.so.2");
  if (!r_debug) r_debug = symbols.data_symbol("_r_debug");
  if (!r_debug) return std::nullopt;
  auto brk = read_field<ElfW(Addr)>(
      memory, *r_debug + static_cast<std::int64_t>(offsetof(struct r_debug, r_brk)));
  if (!brk || !*brk) return std::nullopt;
  return LinkMapWatch(*r_debug, RuntimeAddr(*brk));
}

bool LinkMapWatch::consistent(TraceeMemory& memory) const {
  auto state = read_field<int>(
      memory, r_debug_ + static_cast<std::int64_t>(offsetof(struct r_debug, r_state)));
  return state && *state == r_debug::RT_CONSISTENT;
}

}  // namespace probecost
