#pragma once
// ELF symbols of a live process through elfutils' libdwfl: dwfl_linux_proc_report reads
// /proc/PID/maps, so every address it returns already includes the module's load bias (PIE
// executables, shared libraries, ASLR).
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "breakpoint/address.hpp"

typedef struct Dwfl Dwfl;

namespace probecost {

struct Symbol {
  std::string module;  // path of the ELF file
  std::string name;
  RuntimeAddr address;
  std::uint64_t size = 0;
};

class ProcessSymbols {
 public:
  explicit ProcessSymbols(pid_t pid);
  ~ProcessSymbols();
  ProcessSymbols(const ProcessSymbols&) = delete;
  ProcessSymbols& operator=(const ProcessSymbols&) = delete;

  // Function symbols called `name`; `module` (a file name or path), when given, restricts the
  // search to that module.
  std::vector<Symbol> find(const std::string& name, const std::string& module = {}) const;
  // Exactly one match, or a UsageError that says which process, which symbol and why.
  Symbol resolve(const std::string& name, const std::string& module = {}) const;

 private:
  pid_t pid_;
  Dwfl* dwfl_ = nullptr;
};

}  // namespace probecost
