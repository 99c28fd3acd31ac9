#pragma once
// ELF symbols of a live process through elfutils' libdwfl: dwfl_linux_proc_report reads
// /proc/PID/maps, so every address it returns already includes the module's load bias (PIE
// executables, shared libraries, ASLR). Symbols come from .symtab where the file has one
// (or its separate debug file), from .dynsym otherwise, with the symbol versions .dynsym gives
// them (memcpy@@GLIBC_2.14), so that the same names come out with or without debug files.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/address.hpp"
#include "common/error.hpp"
#include "tracer/symbols/cannot_probe.hpp"

typedef struct Dwfl Dwfl;
typedef struct Dwfl_Module Dwfl_Module;
typedef struct Elf Elf;

namespace probecost {

struct Symbol {
  std::string module;  // path of the ELF file
  std::string name;
  RuntimeAddr address;
  std::uint64_t size = 0;
  // STT_GNU_IFUNC: `address` is the resolver, which returns the implementation the dynamic
  // loader binds calls to (strlen -> __strlen_evex on a CPU with AVX-512). See tracer/ifunc.hpp.
  bool ifunc = false;
};

// A relocated pointer slot in a loaded module that may hold the implementation an IFUNC
// symbol resolved to: an R_X86_64_IRELATIVE of the defining module whose addend is the
// resolver (the module's own calls), or an R_X86_64_JUMP_SLOT / GLOB_DAT against the
// symbol's name in any module (calls from there, once bound).
struct IfuncSlot {
  RuntimeAddr slot;    // where the pointer is, in the live process
  std::string module;  // the module whose relocation it is
  std::string kind;    // "IRELATIVE", "JUMP_SLOT" or "GLOB_DAT"
  // The referencing module's PLT: a lazily bound JUMP_SLOT points back there until the
  // first call, so such a value says nothing.
  std::vector<std::pair<RuntimeAddr, RuntimeAddr>> plt;
};

// A probe's MODULE names no module the process has loaded (a library it has not loaded yet).
class UnknownModule : public CannotProbe {
 public:
  using CannotProbe::CannotProbe;
};

class ProcessSymbols {
 public:
  explicit ProcessSymbols(pid_t pid);
  ~ProcessSymbols();
  ProcessSymbols(const ProcessSymbols&) = delete;
  ProcessSymbols& operator=(const ProcessSymbols&) = delete;

  // Reads /proc/PID/maps again (libraries loaded since).
  void refresh();

  // Function symbols (STT_FUNC and STT_GNU_IFUNC) called `name` (tracer/symbols/cxx_names.hpp: a C
  // or mangled name, a demangled C++ name such as "middle", "middle(long)" or "ns::Klass::method");
  // `module`, when given, restricts the search to the modules it names (has_module). The
  // executable's matches come first. Where a module has the name under its default version
  // (memcpy@@GLIBC_2.14) and a compat one (memcpy@GLIBC_2.2.5), only the default is kept (what a
  // program linked today binds to), unless `name` gives the version itself. A match by the last
  // part of a C++ name alone ("method" for ns::Klass::method) counts only where nothing matches by
  // the whole name.
  std::vector<Symbol> find(const std::string& name, const std::string& module = {}) const;
  // The functions that `name` means: one symbol, or every overload of one C++ function in one
  // module ("middle": middle(long) and middle(int)); the executable's before the libraries'.
  // Else a CannotProbe that says which process, which symbol and why (UnknownModule when
  // `module` names no loaded module).
  std::vector<Symbol> resolve_all(const std::string& name, const std::string& module = {}) const;
  // Exactly one function: resolve_all's, or a CannotProbe when that is an overload set.
  Symbol resolve(const std::string& name, const std::string& module = {}) const;
  // Function symbols whose name, mangled or demangled, matches the glob `pattern`, sorted by
  // module then name.
  std::vector<Symbol> list(const std::string& pattern) const;
  // The function symbol whose [address, address + size) holds `at`.
  std::optional<Symbol> containing(RuntimeAddr at) const;
  // The smallest function symbol with a size that holds `at` (not a size-0 label inside
  // another function, which containing() may return): what a jump plan decodes. A walk of the
  // module's symbols (a fraction of a millisecond in libc): each answer is kept, so that one
  // asked before the process is stopped costs nothing once it is.
  std::optional<Symbol> sized_function_containing(RuntimeAddr at) const;
  // "symbol+0x12 in libc.so.6", or "0x7f.. in libc.so.6", or "0x7f.." for unknown addresses;
  // C++ names demangled.
  std::string describe(RuntimeAddr at) const;

  // Every name of the function that starts at `at`, without symbol versions, demangled,
  // sorted: the exported ones (.dynsym: readdir, readdir64) where the module exports any there,
  // else every name in its symbol table (__memcpy_avx_unaligned_erms,
  // __memmove_avx_unaligned_erms).
  std::vector<std::string> names_at(RuntimeAddr at) const;
  // The slots that may hold what `ifunc` resolved to, the defining module's IRELATIVE slots
  // first, then the executable's, then the other modules'.
  std::vector<IfuncSlot> ifunc_slots(const Symbol& ifunc) const;
  // The canonical frame address before the instruction at `at` runs, as %rsp + the offset
  // returned, from its module's call frame information (.eh_frame, else .debug_frame); none
  // where there is none or the CFA is not %rsp-based (a frame pointer, an expression).
  std::optional<std::int64_t> cfa_from_sp(RuntimeAddr at) const;
  // The first defined data symbol (STT_OBJECT) called `name`, any version, in the modules
  // `module` names (has_module; all when empty): ld.so's _r_debug.
  std::optional<RuntimeAddr> data_symbol(const std::string& name,
                                         const std::string& module = {}) const;
  // Calls f(path, elf, bias) for the ELF file of every module `module` names (all when empty;
  // has_module), executable first: `bias` is runtime address minus file address (USDT notes).
  void for_each_elf(const std::string& module,
                    const std::function<void(const std::string&, Elf*, std::int64_t)>& f) const;
  // The path of the module mapped at `at`; empty when none is.
  std::string module_at(RuntimeAddr at) const;

  // The executable's path (the module mapped from /proc/PID/exe).
  const std::string& executable() const { return executable_; }
  // True when `module` (a path as in Symbol::module) has a .symtab section.
  bool has_symtab(const std::string& module) const;
  // Module paths, executable first.
  std::vector<std::string> modules() const;
  // True when a loaded module is `module`: its path (or another path of the same file), its
  // file name ("libsqlite3.so.0.8.6") or its SONAME ("libsqlite3.so.0").
  bool has_module(const std::string& module) const;

 private:
  struct Tables;
  struct Function;
  void report();
  const Tables& tables(Dwfl_Module* mod) const;
  bool module_matches(Dwfl_Module* mod, const std::string& wanted) const;
  // Every defined function symbol of the modules `module` names (all when empty), its name
  // with the version .dynsym gives it.
  void for_each_function(const std::string& module,
                         const std::function<void(const Function&)>& f) const;
  [[noreturn]] void fail_not_found(const std::string& name, const std::string& module) const;

  pid_t pid_;
  Dwfl* dwfl_ = nullptr;
  std::string executable_;
  // Per module, read when first needed: SONAME and symbol versions.
  mutable std::map<const Dwfl_Module*, std::unique_ptr<Tables>> tables_;
  mutable std::map<std::uint64_t, std::optional<Symbol>> sized_functions_;
};

// The function symbols of one ELF file, given as its bytes (`image`; `name` for messages),
// read through libdwfl as for a process, offline: addresses are the file's own. No separate
// debug file is looked for. Error when libdwfl cannot read it as an ELF file.
std::vector<Symbol> read_elf_symbols(const std::vector<char>& image, const std::string& name);

}  // namespace probecost
