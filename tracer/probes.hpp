#pragma once
// Probe specifications as a user writes them, and their resolution in a live process:
//   SYMBOL   MODULE:SYMBOL   SYMBOL+OFFSET   MODULE:SYMBOL+OFFSET   0xADDRESS
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/tracee_memory.hpp"
#include "tracer/symbols.hpp"

namespace probecost {

struct ProbeSpec {
  std::string text;
  std::string module;  // empty: the executable, then the libraries
  std::string symbol;  // empty for an address
  std::uint64_t offset = 0;
  std::optional<RuntimeAddr> address;
};

// UsageError on a malformed spec.
ProbeSpec parse_probe(const std::string& text);

struct ResolvedProbe {
  std::string spec;
  RuntimeAddr address;
  std::string module;
  std::string symbol;  // "name" or "name+0x10"; empty when no symbol covers the address
};

// Every spec to the addresses it names (several per spec only with `all_matches`), each
// checked: mapped, executable, at an instruction boundary. UsageError names the spec, the
// process and the reason; nothing is written to the tracee.
std::vector<ResolvedProbe> resolve_probes(const std::vector<std::string>& specs,
                                          const ProcessSymbols& symbols, TraceeMemory& memory,
                                          pid_t pid, bool all_matches);

// The placement check alone (for an address from anywhere).
void check_placement(RuntimeAddr at, const ProcessSymbols& symbols, TraceeMemory& memory,
                     pid_t pid);

}  // namespace probecost
