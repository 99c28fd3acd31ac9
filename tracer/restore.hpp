#pragma once
// `probecost restore -p PID`: puts back what a probecost that died left in a process.
//
// Jump probes are found through the header of the shared area they jump into (a memfd named
// probecost-jump): it lists each site with its original bytes.
// An int3 byte in text backed by a file needs no record of ours to be found: the file says what
// the byte was. Every executable file-backed mapping is compared with its file; a byte that is
// int3 in memory but not in the file, at an instruction boundary of a function (decoded from
// the file's bytes), is put back, with every thread stopped and a thread already trapped on it
// rewound.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/address.hpp"

namespace probecost {

struct RestoredByte {
  RuntimeAddr address;
  std::string module;
  std::string where;  // symbol+offset
  std::uint8_t original = 0;
  bool restored = false;
  std::string why_not;  // when left alone
};

// A jump probe found through the header of a jump area (see breakpoint/jump_area.hpp).
struct RestoredJump {
  RuntimeAddr address;
  std::string where;  // symbol+offset in module
  std::size_t length = 0;
  std::uint64_t hits = 0;  // what its counter says
  pid_t tracer_pid = 0;
  std::string state;  // "patched", "half-patched", "original", "changed since (left alone)"
  bool restored = false;
};

struct RestoreReport {
  pid_t pid = 0;
  std::size_t mappings_compared = 0;
  std::vector<RestoredByte> bytes;
  std::vector<RestoredJump> jumps;
  std::vector<std::string> notes;  // areas that could not be read, and why
};

// With `dry_run`, finds and reports but writes nothing.
RestoreReport restore_process(pid_t pid, bool dry_run);

}  // namespace probecost
