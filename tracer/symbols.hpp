#pragma once
// ELF symbols of a live process through elfutils' libdwfl: dwfl_linux_proc_report reads
// /proc/PID/maps, so every address it returns already includes the module's load bias (PIE
// executables, shared libraries, ASLR). Symbols come from .symtab where the file has one
// (or its separate debug file), from .dynsym otherwise.
#include <sys/types.h>

#include <cstdint>
#include <optional>
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

  // Reads /proc/PID/maps again (libraries loaded since).
  void refresh();

  // Function symbols called `name`; `module` (a file name or path), when given, restricts the
  // search to that module. The executable's matches come first.
  std::vector<Symbol> find(const std::string& name, const std::string& module = {}) const;
  // Exactly one match, or a UsageError that says which process, which symbol and why.
  Symbol resolve(const std::string& name, const std::string& module = {}) const;
  // Function symbols whose name matches the glob `pattern`, sorted by module then name.
  std::vector<Symbol> list(const std::string& pattern) const;
  // The function symbol whose [address, address + size) holds `at`.
  std::optional<Symbol> containing(RuntimeAddr at) const;
  // The smallest function symbol with a size that holds `at` (not a size-0 label inside
  // another function, which containing() may return): what a jump plan decodes.
  std::optional<Symbol> sized_function_containing(RuntimeAddr at) const;
  // "symbol+0x12 in libc.so.6", or "0x7f.. in libc.so.6", or "0x7f.." for unknown addresses.
  std::string describe(RuntimeAddr at) const;

  // The executable's path (the module mapped from /proc/PID/exe).
  const std::string& executable() const { return executable_; }
  // True when `module` (a path as in Symbol::module) has a .symtab section.
  bool has_symtab(const std::string& module) const;
  // Module paths, executable first.
  std::vector<std::string> modules() const;

 private:
  void report();
  pid_t pid_;
  Dwfl* dwfl_ = nullptr;
  std::string executable_;
};

// The function symbols of one ELF file, given as its bytes (`image`; `name` for messages),
// read through libdwfl as for a process, offline: addresses are the file's own. No separate
// debug file is looked for. Error when libdwfl cannot read it as an ELF file.
std::vector<Symbol> read_elf_symbols(const std::vector<char>& image, const std::string& name);

}  // namespace probecost
