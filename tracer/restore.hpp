#pragma once
// `probecost restore -p PID`: puts back what a probecost that died left in a process.
//
// An int3 byte in text backed by a file needs no record of ours to be found: the file says what
// the byte was. Every executable file-backed mapping is compared with its file; a byte that is
// int3 in memory but not in the file, at an instruction boundary of a function (decoded from
// the file's bytes), is put back, with every thread stopped and a thread already trapped on it
// rewound.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "breakpoint/address.hpp"

namespace probecost {

struct RestoredByte {
  RuntimeAddr address;
  std::string module;
  std::string where;  // symbol+offset
  std::uint8_t original = 0;
  bool restored = false;
  std::string why_not;  // when left alone
};

struct RestoreReport {
  pid_t pid = 0;
  std::size_t mappings_compared = 0;
  std::vector<RestoredByte> bytes;
};

// With `dry_run`, finds and reports but writes nothing.
RestoreReport restore_process(pid_t pid, bool dry_run);

}  // namespace probecost
