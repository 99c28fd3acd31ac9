#pragma once
// Small readers of one ELF file's tables through libelf's gelf interface, shared by the symbol
// code: sections by type, symbol tables, the PLT's extent, the SONAME, and the GNU symbol
// versions of .dynsym.
#include <gelf.h>

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/address.hpp"

namespace probecost {

// The sections of `elf` of one type, with their headers.
std::vector<std::pair<Elf_Scn*, GElf_Shdr>> sections_of_type(Elf* elf, GElf_Word type);

// Calls `f(index, name, sym)` for each named symbol of a symbol table section (.dynsym,
// .symtab).
template <typename F>
void for_each_symbol(Elf* elf, Elf_Scn* scn, const GElf_Shdr& shdr, F&& f) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  std::size_t entsize = shdr.sh_entsize ? shdr.sh_entsize : sizeof(Elf64_Sym);
  for (std::size_t i = 1; data && i < shdr.sh_size / entsize; ++i) {
    GElf_Sym sym;
    if (!gelf_getsym(data, static_cast<int>(i), &sym)) break;
    const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
    if (name && *name) f(i, name, sym);
  }
}

// The runtime extent of .plt, .plt.sec and .plt.got (`bias`: the module's load bias).
std::vector<std::pair<RuntimeAddr, RuntimeAddr>> plt_ranges(Elf* elf, GElf_Addr bias);

// DT_SONAME ("libc.so.6"); empty when the file has none (an executable).
std::string soname_of(Elf* elf);

// The versions that .dynsym gives the symbols a shared library defines (GNU symbol versioning:
// .gnu.version holds one half-word per .dynsym entry, an index into the versions that
// .gnu.version_d defines; its VERSYM_HIDDEN bit (0x8000) marks a version that is not the
// default one, kept for programs linked against it long ago). readelf prints them as
// memcpy@GLIBC_2.2.5 and memcpy@@GLIBC_2.14; libdwfl gives both as plain "memcpy", at two
// addresses.
class SymbolVersions {
 public:
  SymbolVersions() = default;
  // `bias`: the module's load bias, so that lookups are by runtime address.
  SymbolVersions(Elf* elf, GElf_Addr bias);

  // "memcpy@@GLIBC_2.14" (the default version) or "memcpy@GLIBC_2.2.5" (a hidden one) for the
  // .dynsym symbol `name` at `at`; `name` itself when .dynsym gives it no version of its own
  // (an executable's symbols, a library without versions, a local symbol) or `name` has one.
  std::string decorate(std::string_view name, RuntimeAddr at) const;

 private:
  // Runtime address -> {name, decorated name}: looked up for every symbol of a module, by
  // address first, with no string built.
  std::unordered_map<std::uint64_t, std::vector<std::pair<std::string, std::string>>> at_;
};

}  // namespace probecost
