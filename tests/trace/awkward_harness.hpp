#pragma once
// The harness of the jump safety tests (issue 15) on awkward_target: a launched
// `probecost trace` with its report, an untraced run to compare with, the instruction boundaries
// of a function of a live process, and what the process maps.
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "breakpoint/x86/decoder.hpp"
#include "run_capture.hpp"
#include "trace_harness.hpp"
#include "tracer/os/memory.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost::test {

struct Traced {
  Result run;
  Json report;
};

// `probecost trace ARGS -f json -o FILE -- COMMAND`.
inline Traced trace_launched(std::vector<std::string> args,
                             const std::vector<std::string>& command) {
  char path[] = "/tmp/probecost-awkward-XXXXXX";
  ::close(::mkstemp(path));
  args.insert(args.begin(), {PROBECOST_BIN, "trace", "-f", "json", "-o", path});
  args.push_back("--");
  args.insert(args.end(), command.begin(), command.end());
  Traced t{run_command(args), {}};
  std::ifstream in(path);
  if (in.peek() != std::ifstream::traits_type::eof()) t.report = Json::parse(in, nullptr, false);
  ::unlink(path);
  return t;
}

// The hits of the probe whose spec is `spec`; -1 if none is.
inline std::int64_t hits_of(const Json& report, const std::string& spec) {
  for (const auto& p : report["probes"]) {
    if (p["spec"] == spec) return p["hits"].get<std::int64_t>();
  }
  return -1;
}

inline const Json& probe_of(const Json& report, const std::string& spec) {
  for (const auto& p : report["probes"]) {
    if (p["spec"] == spec) return p;
  }
  static const Json none;
  return none;
}

// Offsets from the start of `function` (in process `pid`) of each of its instructions.
inline std::vector<std::uint64_t> boundaries(pid_t pid, const std::string& function) {
  ProcessSymbols symbols(pid);
  Symbol f = symbols.resolve(function);
  std::vector<std::uint8_t> code(f.size);
  ProcMemory(pid).read(f.address, code);
  std::vector<std::uint64_t> out;
  for (std::size_t off = 0; off < code.size();) {
    auto in = decode(std::span(code).subspan(off), f.address + static_cast<std::int64_t>(off));
    if (!in) break;
    out.push_back(off);
    off += in->length;
  }
  return out;
}

inline std::string spec(const std::string& function, std::uint64_t offset) {
  return offset ? function + "+" + std::to_string(offset) : function;
}

// -b SPEC for each offset of `function`.
inline std::vector<std::string> probe_args(const std::string& function,
                                           const std::vector<std::uint64_t>& offsets) {
  std::vector<std::string> args;
  for (auto off : offsets) args.insert(args.end(), {"-b", spec(function, off)});
  return args;
}

inline bool maps_mention(pid_t pid, const std::string& what) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(in, line);) {
    if (line.find(what) != std::string::npos) return true;
  }
  return false;
}

}  // namespace probecost::test
