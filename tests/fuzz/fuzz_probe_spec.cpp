// libFuzzer: probe specs as a user types them (-b SPEC). A malformed one is a UsageError;
// anything else (a crash, another exception, a spec that does not say what it parsed) is a bug.
// The name a spec gives is then matched, as a C++ name, against the input as a symbol's.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "tracer/symbols/cxx_names.hpp"
#include "tracer/symbols/probes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    probecost::ProbeSpec p = probecost::parse_probe(text);
    // What was parsed is what was typed: an address, or a symbol with its module and offset.
    if (p.text != text) __builtin_trap();
    if (!p.address && p.symbol.empty()) __builtin_trap();
    if (p.address && !p.symbol.empty()) __builtin_trap();
    // A USDT spec names its module after "usdt:" (usdt:MODULE:PROVIDER:NAME).
    std::string prefix = p.usdt ? "usdt:" : "";
    if (!p.module.empty() && text.find(prefix + p.module + ":") != 0) __builtin_trap();
    if (p.usdt && text.find(prefix + (p.module.empty() ? "" : p.module + ":") + p.symbol) != 0)
      __builtin_trap();
    if (!p.symbol.empty() &&
        probecost::NameQuery(p.symbol).match(p.symbol) != probecost::NameQuery::Match::Exact)
      __builtin_trap();
    probecost::NameQuery(p.symbol).match(text);
    probecost::demangle(text);
  } catch (const probecost::UsageError&) {
  }
  return 0;
}
