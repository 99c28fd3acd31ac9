#pragma once
// The torture corpus as the driver sees it: the programs (built by tests/torture/CMakeLists.txt
// into bin/torture/), and in each the t_* functions with every instruction boundary, decoded
// from the file with the project's decoder (breakpoint/x86/decoder.hpp).
#include <cstdint>
#include <string>
#include <vector>

namespace torture {

struct Program {
  std::string name;  // torture_NAME in bin/torture/
  // Attached (-p) once it says "parked" on fd 3, and released by a line on stdin; launched
  // otherwise.
  bool attach = false;
  bool in_short_form = false;
};

const std::vector<Program>& programs();

struct Function {
  std::string name;
  std::uint64_t address = 0;      // in the file (st_value)
  std::uint64_t file_offset = 0;  // of its first byte: where the kernel's uprobe goes
  std::uint64_t size = 0;
  std::vector<std::uint32_t> boundaries;  // offsets of its instructions from its start
  std::vector<std::string> texts;         // each instruction, for reports
  // Why the kernel's uprobe is no reference at each boundary, or empty: it refuses the
  // instruction, counts otherwise, or changes what the program does (compare/uprobe.hpp).
  std::vector<std::string> uncounted;
  std::string skipped;  // why it is not probed on this machine (a CPU feature it lacks)
  // Part of its code is in another symbol (GCC's NAME.cold): `record` patches the returns of
  // the function's own range only, so a call that returns from there is unmatched.
  bool has_cold_part = false;
};

// The t_* functions of the ELF file at `path`, sorted by address. Error (std::runtime_error)
// when the file cannot be read or a function does not decode to its end.
std::vector<Function> functions_of(const std::string& path);

}  // namespace torture
