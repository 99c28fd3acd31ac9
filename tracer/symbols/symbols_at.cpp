// ProcessSymbols: what is at an address; and the symbols of one ELF image in memory.
#include <dwarf.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/error.hpp"
#include "tracer/symbols/cxx_names.hpp"
#include "tracer/symbols/dwfl_callbacks.hpp"
#include "tracer/symbols/dwfl_modules.hpp"
#include "tracer/symbols/elf_tables.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

std::optional<Symbol> ProcessSymbols::containing(RuntimeAddr at) const {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return std::nullopt;
  GElf_Off offset = 0;
  GElf_Sym sym;
  const char* name =
      dwfl_module_addrinfo(mod, at.value(), &offset, &sym, nullptr, nullptr, nullptr);
  if (!name || GELF_ST_TYPE(sym.st_info) != STT_FUNC) return std::nullopt;
  if (sym.st_size && offset >= sym.st_size) return std::nullopt;
  return Symbol{module_path(mod), name, at - static_cast<std::int64_t>(offset), sym.st_size};
}

std::optional<Symbol> ProcessSymbols::sized_function_containing(RuntimeAddr at) const {
  auto [kept, fresh] = sized_functions_.try_emplace(at.value());
  if (!fresh) return kept->second;
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return std::nullopt;
  std::optional<Symbol>& best = kept->second;
  for_each_function_symbol(mod, [&](const char* name, const GElf_Sym& sym, GElf_Addr addr) {
    if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_size || at.value() < addr ||
        at.value() - addr >= sym.st_size)
      return;
    if (!best || sym.st_size < best->size) {
      best = Symbol{module_path(mod), name, RuntimeAddr(addr), sym.st_size};
    }
  });
  return best;
}

std::string ProcessSymbols::describe(RuntimeAddr at) const {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return at.hex();
  std::string in = " in " + base_name(module_path(mod));
  GElf_Off offset = 0;
  GElf_Sym sym;
  const char* name =
      dwfl_module_addrinfo(mod, at.value(), &offset, &sym, nullptr, nullptr, nullptr);
  if (!name) {
    // No symbol (a local one, stripped without libc6-dbg): the module and the offset in it, the
    // same from run to run (perf's "libc.so.6+0x3abf3"), never the randomised address.
    Dwarf_Addr start = 0;
    dwfl_module_info(mod, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
    char rel[32];
    std::snprintf(rel, sizeof rel, "+0x%llx", static_cast<unsigned long long>(at.value() - start));
    return base_name(module_path(mod)) + rel;
  }
  char off[32] = "";
  if (offset) std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(offset));
  return demangle(name) + off + in;
}

std::optional<std::int64_t> ProcessSymbols::cfa_from_sp(RuntimeAddr at) const {
  constexpr Dwarf_Word kDwarfRsp = 7;  // the x86-64 psABI's DWARF register number of %rsp
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return std::nullopt;
  Dwarf_Addr bias = 0;
  Dwarf_CFI* cfi = dwfl_module_eh_cfi(mod, &bias);
  if (!cfi) cfi = dwfl_module_dwarf_cfi(mod, &bias);
  Dwarf_Frame* frame = nullptr;
  if (!cfi || dwarf_cfi_addrframe(cfi, at.value() - bias, &frame) != 0) return std::nullopt;
  std::unique_ptr<Dwarf_Frame, decltype(&std::free)> owned(frame, &std::free);
  Dwarf_Op* ops = nullptr;
  std::size_t n = 0;
  // libdw gives a "register + offset" CFA rule as one DW_OP_bregx op.
  if (dwarf_frame_cfa(frame, &ops, &n) != 0 || n != 1 || ops[0].atom != DW_OP_bregx ||
      ops[0].number != kDwarfRsp)
    return std::nullopt;
  return static_cast<std::int64_t>(ops[0].number2);
}

std::optional<RuntimeAddr> ProcessSymbols::data_symbol(const std::string& name,
                                                       const std::string& module) const {
  std::optional<RuntimeAddr> out;
  for_each_module(dwfl_, [&](Dwfl_Module* mod) {
    if (!module_matches(mod, module)) return true;
    int n = dwfl_module_getsymtab(mod);
    for (int i = 1; i < n && !out; ++i) {
      GElf_Sym sym;
      GElf_Addr addr;
      const char* s = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
      if (s && GELF_ST_TYPE(sym.st_info) == STT_OBJECT && sym.st_shndx != SHN_UNDEF &&
          without_version(s) == name) {
        out = RuntimeAddr(addr);
      }
    }
    return !out;
  });
  return out;
}

std::string ProcessSymbols::module_at(RuntimeAddr at) const {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  return mod ? module_path(mod) : "";
}

std::vector<std::string> ProcessSymbols::names_at(RuntimeAddr at) const {
  std::vector<std::string> exported, all;
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return {};
  GElf_Addr bias = 0;
  if (Elf* elf = dwfl_module_getelf(mod, &bias)) {
    for (auto& [scn, shdr] : sections_of_type(elf, SHT_DYNSYM)) {
      for_each_symbol(elf, scn, shdr, [&](std::size_t, const char* name, const GElf_Sym& sym) {
        if (is_function(sym) && sym.st_value + bias == at.value()) exported.push_back(name);
      });
    }
  }
  if (exported.empty()) {
    for_each_function_symbol(mod, [&](const char* name, const GElf_Sym&, GElf_Addr addr) {
      if (addr == at.value()) all.push_back(name);
    });
  }
  std::vector<std::string>& names = exported.empty() ? all : exported;
  for (auto& name : names) name = demangle(without_version(name));
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

bool ProcessSymbols::has_symtab(const std::string& module) const {
  bool found = false;
  for_each_module(dwfl_, [&](Dwfl_Module* mod) {
    if (module_path(mod) != module) return true;
    GElf_Addr bias;
    Elf* elf = dwfl_module_getelf(mod, &bias);
    found = elf && !sections_of_type(elf, SHT_SYMTAB).empty();
    return false;
  });
  return found;
}

std::vector<Symbol> read_elf_symbols(const std::vector<char>& image, const std::string& name) {
  Dwfl* dwfl = dwfl_begin(image_callbacks());
  if (!dwfl) throw Error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
  // libdwfl reads the image in place (elf_memory) for as long as the session lives.
  std::vector<char> copy = image;
  // dwfl_report_offline_memory (elfutils 0.188) dereferences a null Elf when elf_memory
  // refuses the image (an empty one): check that it is an ELF file first.
  elf_version(EV_CURRENT);
  Elf* probe = copy.empty() ? nullptr : elf_memory(copy.data(), copy.size());
  bool is_elf = probe && elf_kind(probe) == ELF_K_ELF;
  if (probe) elf_end(probe);
  if (!is_elf) {
    dwfl_end(dwfl);
    throw Error("cannot read the symbols of " + name + ": not an ELF file");
  }
  Dwfl_Module* mod =
      dwfl_report_offline_memory(dwfl, name.c_str(), name.c_str(), copy.data(), copy.size());
  if (!mod) {
    std::string why = dwfl_errmsg(-1);
    dwfl_end(dwfl);
    throw Error("cannot read the symbols of " + name + ": " + why);
  }
  dwfl_report_end(dwfl, nullptr, nullptr);
  std::vector<Symbol> out;
  for_each_function_symbol(mod, [&](const char* sym_name, const GElf_Sym& sym, GElf_Addr addr) {
    out.push_back(Symbol{name, sym_name, RuntimeAddr(addr), sym.st_size,
                         GELF_ST_TYPE(sym.st_info) == STT_GNU_IFUNC});
  });
  dwfl_end(dwfl);
  dedupe(out, false);
  return out;
}

}  // namespace probecost
