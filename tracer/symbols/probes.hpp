#pragma once
// Probe specifications as a user writes them, and their resolution in a live process:
//   SYMBOL   MODULE:SYMBOL   SYMBOL+OFFSET   MODULE:SYMBOL+OFFSET   0xADDRESS
//   usdt:PROVIDER:NAME   usdt:MODULE:PROVIDER:NAME   (tracer/symbols/usdt.hpp)
// SYMBOL is a C or mangled name, with an optional version (memcpy@GLIBC_2.2.5), or a demangled
// C++ name (middle, 'middle(long)', ns::Klass::method: tracer/symbols/cxx_names.hpp). MODULE is a
// file name or SONAME (libsqlite3.so.0.8.6 or libsqlite3.so.0) or a path.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/x86/tracee_memory.hpp"
#include "tracer/symbols/ifunc.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

struct ProbeSpec {
  std::string text;
  std::string module;  // empty: the executable, then the libraries
  std::string symbol;  // empty for an address
  std::uint64_t offset = 0;
  std::optional<RuntimeAddr> address;
  bool usdt = false;  // a USDT marker: `module` as given, `symbol` "PROVIDER:NAME"
};

// UsageError on a malformed spec.
ProbeSpec parse_probe(const std::string& text);

struct ResolvedProbe {
  std::string spec;
  RuntimeAddr address;
  std::string module;
  std::string symbol;  // "name" or "name+0x10"; empty when no symbol covers the address
  // At a function's start: every name of that function (readdir and readdir64, one address).
  std::vector<std::string> names;
  // `symbol` is an IFUNC: the implementation probed instead ("__strlen_evex", or its address
  // when no symbol names it), and how we know the process uses it.
  std::string implementation;
  std::string resolved_by;
  // A USDT marker (tracer/symbols/usdt.hpp): its semaphore, which the tracer raises while the
  // probe is in, and its argument specs.
  bool usdt = false;
  std::optional<RuntimeAddr> semaphore;
  std::string usdt_args;
};

// Every spec to the addresses it names (several per spec only with `all_matches`), each
// checked: mapped, executable, at an instruction boundary. An IFUNC symbol names the
// implementation the process uses (tracer/symbols/ifunc.hpp; `call_resolver` runs its resolver in
// the tracee when no relocated slot tells). CannotProbe names the spec, the process and the
// reason; nothing is written to the tracee (a resolver call leaves it as it was).
std::vector<ResolvedProbe> resolve_probes(const std::vector<std::string>& specs,
                                          const ProcessSymbols& symbols, TraceeMemory& memory,
                                          pid_t pid, bool all_matches,
                                          const ResolverCall& call_resolver = {});

// Probes at one address (readdir and readdir64; memcpy and memmove, whose IFUNCs resolve to one
// implementation) become one, counted once: the first keeps its place, its spec becomes
// "SPEC1, SPEC2", and `names` gains the other probes' symbols.
void merge_same_address(std::vector<ResolvedProbe>& probes);

// The placement check alone (for an address from anywhere). `function_start`: the address is
// known to be where a function starts (what an IFUNC resolver returned), so an instruction
// boundary even when no symbol covers it (libc without its debug symbols).
void check_placement(RuntimeAddr at, const ProcessSymbols& symbols, TraceeMemory& memory, pid_t pid,
                     bool function_start = false);

}  // namespace probecost
