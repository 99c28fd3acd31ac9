#include "tracer/symbols.hpp"

#include <elfutils/libdwfl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <tuple>

#include "common/error.hpp"

namespace probecost {

namespace {

char* debuginfo_path = nullptr;
const Dwfl_Callbacks kProcCallbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = nullptr,
    .debuginfo_path = &debuginfo_path,
};

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

bool module_matches(const char* path, const std::string& wanted) {
  if (wanted.empty()) return true;
  if (!path) return false;
  if (wanted.find('/') != std::string::npos) return wanted == path;
  return wanted == base_name(path);
}

// "clock_nanosleep@@GLIBC_2.17" and "clock_nanosleep@GLIBC_2.2.5" are both what a user means
// by clock_nanosleep: compare names without the symbol version.
bool same_symbol(const std::string& wanted, const char* name) {
  std::size_t n = wanted.size();
  return wanted.compare(0, n, name, std::min(n, std::strlen(name))) == 0 &&
         (name[n] == '\0' || (name[n] == '@' && wanted.find('@') == std::string::npos));
}

// A function the program can call: STT_FUNC, or STT_GNU_IFUNC (whose value is its resolver).
bool is_function(const GElf_Sym& sym) {
  int type = GELF_ST_TYPE(sym.st_info);
  return (type == STT_FUNC || type == STT_GNU_IFUNC) && sym.st_shndx != SHN_UNDEF;
}

bool is_ifunc(const GElf_Sym& sym) {
  return GELF_ST_TYPE(sym.st_info) == STT_GNU_IFUNC;
}

// "memcpy@GLIBC_2.2.5": a compat version, kept for programs linked long ago. "memcpy@@GLIBC_2.14"
// (the default version) and "memcpy" are what a program linked today gets.
bool compat_version(const std::string& name) {
  auto at = name.find('@');
  return at != std::string::npos && name.compare(at, 2, "@@") != 0;
}

std::string without_version(const std::string& name) {
  return name.substr(0, name.find('@'));
}

const char* module_path(Dwfl_Module* mod) {
  const char* path = nullptr;
  const char* name =
      dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &path, nullptr);
  return path ? path : name;
}

// Calls `f(module, symbol, address)` for every defined function symbol of every module.
void for_each_function(
    Dwfl* dwfl, const std::function<void(Dwfl_Module*, const char*, GElf_Sym&, GElf_Addr)>& f) {
  auto visit = [](Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) -> int {
    auto& fn =
        *static_cast<const std::function<void(Dwfl_Module*, const char*, GElf_Sym&, GElf_Addr)>*>(
            arg);
    int n = dwfl_module_getsymtab(mod);
    for (int i = 1; i < n; ++i) {
      GElf_Sym sym;
      GElf_Addr addr;
      const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
      if (!name || !*name || !is_function(sym)) continue;
      fn(mod, name, sym, addr);
    }
    return DWARF_CB_OK;
  };
  dwfl_getmodules(dwfl, visit, const_cast<void*>(static_cast<const void*>(&f)), 0);
}

// The same function can appear in .symtab and .dynsym of one module, and under several names
// (versions, aliases): keep one entry per address (a default-version name rather than a compat
// one, and an IFUNC when any of its names there is one), or per (address, name) for listings.
void dedupe(std::vector<Symbol>& v, bool by_address) {
  std::stable_sort(v.begin(), v.end(), [](const Symbol& a, const Symbol& b) {
    return std::tuple(a.module, a.address, compat_version(a.name)) <
           std::tuple(b.module, b.address, compat_version(b.name));
  });
  for (std::size_t i = 0; by_address && i < v.size();) {
    std::size_t end = i;
    bool ifunc = false;
    for (; end < v.size() && v[end].module == v[i].module && v[end].address == v[i].address;
         ++end) {
      ifunc = ifunc || v[end].ifunc;
    }
    for (; i < end; ++i) v[i].ifunc = ifunc;
  }
  v.erase(std::unique(v.begin(), v.end(),
                      [by_address](const Symbol& a, const Symbol& b) {
                        return a.address == b.address && (by_address || a.name == b.name);
                      }),
          v.end());
}

// One ELF image in memory: no files, no separate debug files are looked for.
int no_debuginfo(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char*, const char*, GElf_Word,
                 char**) {
  return -1;
}
const Dwfl_Callbacks kImageCallbacks = {
    .find_elf = nullptr,
    .find_debuginfo = no_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &debuginfo_path,
};

}  // namespace

std::vector<Symbol> read_elf_symbols(const std::vector<char>& image, const std::string& name) {
  Dwfl* dwfl = dwfl_begin(&kImageCallbacks);
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
  for_each_function(dwfl, [&](Dwfl_Module*, const char* sym_name, GElf_Sym& sym, GElf_Addr addr) {
    out.push_back(Symbol{name, sym_name, RuntimeAddr(addr), sym.st_size, is_ifunc(sym)});
  });
  dwfl_end(dwfl);
  dedupe(out, false);
  return out;
}

ProcessSymbols::ProcessSymbols(pid_t pid) : pid_(pid) {
  char exe[PATH_MAX];
  std::string link = "/proc/" + std::to_string(pid) + "/exe";
  ssize_t n = ::readlink(link.c_str(), exe, sizeof exe - 1);
  if (n > 0) executable_.assign(exe, n);
  report();
}

void ProcessSymbols::report() {
  if (dwfl_) dwfl_end(dwfl_);
  dwfl_ = dwfl_begin(&kProcCallbacks);
  if (!dwfl_) throw Error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
  // Three outcomes (elfutils tests/vdsosyms.c): 0 ok, -1 a libdwfl error, >0 an errno.
  int r = dwfl_linux_proc_report(dwfl_, pid_);
  if (r != 0) {
    std::string why = r < 0 ? dwfl_errmsg(-1) : std::strerror(r);
    dwfl_end(dwfl_);
    dwfl_ = nullptr;
    throw Error("cannot read the modules of process " + std::to_string(pid_) + ": " + why);
  }
  dwfl_report_end(dwfl_, nullptr, nullptr);
}

void ProcessSymbols::refresh() {
  report();
}

ProcessSymbols::~ProcessSymbols() {
  if (dwfl_) dwfl_end(dwfl_);
}

std::vector<Symbol> ProcessSymbols::find(const std::string& name, const std::string& module) const {
  std::vector<Symbol> out;
  for_each_function(
      dwfl_, [&](Dwfl_Module* mod, const char* sym_name, GElf_Sym& sym, GElf_Addr addr) {
        const char* path = module_path(mod);
        if (std::strlen(sym_name) >= name.size() && same_symbol(name, sym_name) &&
            module_matches(path, module)) {
          out.push_back(
              Symbol{path ? path : "?", sym_name, RuntimeAddr(addr), sym.st_size, is_ifunc(sym)});
        }
      });
  dedupe(out, true);
  if (name.find('@') == std::string::npos) {
    // A module's compat versions go where it has the default one too.
    std::set<std::string> with_default;
    for (const auto& s : out) {
      if (!compat_version(s.name)) with_default.insert(s.module);
    }
    std::erase_if(out, [&](const Symbol& s) {
      return compat_version(s.name) && with_default.count(s.module);
    });
  }
  std::stable_partition(out.begin(), out.end(),
                        [&](const Symbol& s) { return s.module == executable_; });
  return out;
}

Symbol ProcessSymbols::resolve(const std::string& name, const std::string& module) const {
  auto found = find(name, module);
  std::string where = module.empty() ? "" : " in module '" + module + "'";
  if (found.empty()) {
    std::string why;
    if (module.empty() && !executable_.empty() && !has_symtab(executable_)) {
      why = " (" + std::string(base_name(executable_.c_str())) +
            " has no .symtab: it is stripped, so only its exported .dynsym symbols are known)";
    }
    throw UsageError("no function symbol '" + name + "'" + where + " in process " +
                     std::to_string(pid_) + why);
  }
  // The executable first: a symbol it defines wins over libraries' (as the dynamic linker's
  // lookup order would have it for the executable's own calls).
  if (module.empty() && found.front().module == executable_) return found.front();
  if (found.size() > 1) {
    std::string list;
    for (const auto& s : found) list += "\n  " + s.address.hex() + " " + s.name + " in " + s.module;
    throw UsageError("symbol '" + name + "'" + where + " is ambiguous in process " +
                     std::to_string(pid_) + " (use MODULE:SYMBOL, or --all-matches):" + list);
  }
  return found.front();
}

std::vector<Symbol> ProcessSymbols::list(const std::string& pattern) const {
  std::vector<Symbol> out;
  for_each_function(dwfl_, [&](Dwfl_Module* mod, const char* name, GElf_Sym& sym, GElf_Addr addr) {
    if (fnmatch(pattern.c_str(), name, 0) == 0) {
      const char* path = module_path(mod);
      out.push_back(Symbol{path ? path : "?", name, RuntimeAddr(addr), sym.st_size, is_ifunc(sym)});
    }
  });
  dedupe(out, false);
  std::sort(out.begin(), out.end(), [](const Symbol& a, const Symbol& b) {
    return std::tie(a.module, a.name) < std::tie(b.module, b.name);
  });
  return out;
}

std::optional<Symbol> ProcessSymbols::containing(RuntimeAddr at) const {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return std::nullopt;
  GElf_Off offset = 0;
  GElf_Sym sym;
  const char* name =
      dwfl_module_addrinfo(mod, at.value(), &offset, &sym, nullptr, nullptr, nullptr);
  if (!name || GELF_ST_TYPE(sym.st_info) != STT_FUNC) return std::nullopt;
  if (sym.st_size && offset >= sym.st_size) return std::nullopt;
  const char* path = module_path(mod);
  return Symbol{path ? path : "?", name, at - static_cast<std::int64_t>(offset), sym.st_size};
}

std::optional<Symbol> ProcessSymbols::sized_function_containing(RuntimeAddr at) const {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return std::nullopt;
  std::optional<Symbol> best;
  int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
    if (!name || GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
        !sym.st_size || at.value() < addr || at.value() - addr >= sym.st_size)
      continue;
    if (!best || sym.st_size < best->size) {
      const char* path = module_path(mod);
      best = Symbol{path ? path : "?", name, RuntimeAddr(addr), sym.st_size};
    }
  }
  return best;
}

std::string ProcessSymbols::describe(RuntimeAddr at) const {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return at.hex();
  const char* path = module_path(mod);
  std::string in = std::string(" in ") + (path ? base_name(path) : "?");
  GElf_Off offset = 0;
  GElf_Sym sym;
  const char* name =
      dwfl_module_addrinfo(mod, at.value(), &offset, &sym, nullptr, nullptr, nullptr);
  if (!name) return at.hex() + in;
  char off[32] = "";
  if (offset) std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(offset));
  return std::string(name) + off + in;
}

std::string ProcessSymbols::module_at(RuntimeAddr at) const {
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  const char* path = mod ? module_path(mod) : nullptr;
  return path ? path : "";
}

namespace {

// The sections of `elf` of one type, with their headers.
std::vector<std::pair<Elf_Scn*, GElf_Shdr>> sections_of_type(Elf* elf, GElf_Word type) {
  std::vector<std::pair<Elf_Scn*, GElf_Shdr>> out;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) && shdr.sh_type == type) out.emplace_back(scn, shdr);
  }
  return out;
}

// Calls `f(name, sym)` for each symbol of a symbol table section (.dynsym, .symtab).
template <typename F>
void for_each_symbol(Elf* elf, Elf_Scn* scn, const GElf_Shdr& shdr, F&& f) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  std::size_t entsize = shdr.sh_entsize ? shdr.sh_entsize : sizeof(Elf64_Sym);
  for (std::size_t i = 1; data && i < shdr.sh_size / entsize; ++i) {
    GElf_Sym sym;
    if (!gelf_getsym(data, static_cast<int>(i), &sym)) break;
    const char* name = elf_strptr(elf, shdr.sh_link, sym.st_name);
    if (name && *name) f(name, sym);
  }
}

std::vector<std::pair<RuntimeAddr, RuntimeAddr>> plt_ranges(Elf* elf, GElf_Addr bias) {
  std::vector<std::pair<RuntimeAddr, RuntimeAddr>> out;
  std::size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return out;
  for (auto& [scn, shdr] : sections_of_type(elf, SHT_PROGBITS)) {
    const char* name = elf_strptr(elf, shstrndx, shdr.sh_name);
    if (!name || std::strncmp(name, ".plt", 4) != 0) continue;  // .plt, .plt.sec, .plt.got
    out.emplace_back(RuntimeAddr(shdr.sh_addr + bias),
                     RuntimeAddr(shdr.sh_addr + bias + shdr.sh_size));
  }
  return out;
}

}  // namespace

std::vector<std::string> ProcessSymbols::names_at(RuntimeAddr at) const {
  std::vector<std::string> exported, all;
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at.value());
  if (!mod) return {};
  GElf_Addr bias = 0;
  if (Elf* elf = dwfl_module_getelf(mod, &bias)) {
    for (auto& [scn, shdr] : sections_of_type(elf, SHT_DYNSYM)) {
      for_each_symbol(elf, scn, shdr, [&](const char* name, const GElf_Sym& sym) {
        if (is_function(sym) && sym.st_value + bias == at.value()) exported.push_back(name);
      });
    }
  }
  int n = dwfl_module_getsymtab(mod);
  for (int i = 1; exported.empty() && i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
    if (name && *name && is_function(sym) && addr == at.value()) all.push_back(name);
  }
  std::vector<std::string>& names = exported.empty() ? all : exported;
  for (auto& name : names) name = without_version(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<IfuncSlot> ProcessSymbols::ifunc_slots(const Symbol& ifunc) const {
  struct Walk {
    const Symbol& ifunc;
    std::string name;
    const std::string& executable;
    std::vector<IfuncSlot> own, exe, others;
  } walk{ifunc, without_version(ifunc.name), executable_, {}, {}, {}};
  auto visit = [](Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) -> int {
    auto& w = *static_cast<Walk*>(arg);
    const char* p = module_path(mod);
    std::string path = p ? p : "";
    GElf_Addr bias = 0;
    Elf* elf = dwfl_module_getelf(mod, &bias);
    if (!elf) return DWARF_CB_OK;
    auto plt = plt_ranges(elf, bias);
    for (auto& [scn, shdr] : sections_of_type(elf, SHT_RELA)) {
      Elf_Data* data = elf_getdata(scn, nullptr);
      Elf_Scn* symscn = elf_getscn(elf, shdr.sh_link);
      GElf_Shdr symshdr;
      Elf_Data* symdata = symscn ? elf_getdata(symscn, nullptr) : nullptr;
      if (!data || !symscn || !gelf_getshdr(symscn, &symshdr)) continue;
      std::size_t entsize = shdr.sh_entsize ? shdr.sh_entsize : sizeof(Elf64_Rela);
      for (std::size_t i = 0; i < shdr.sh_size / entsize; ++i) {
        GElf_Rela rela;
        if (!gelf_getrela(data, static_cast<int>(i), &rela)) break;
        auto type = GELF_R_TYPE(rela.r_info);
        IfuncSlot slot{RuntimeAddr(rela.r_offset + bias), path, "", plt};
        if (type == R_X86_64_IRELATIVE) {
          // The defining module's own calls: the addend is the resolver.
          if (path != w.ifunc.module ||
              static_cast<GElf_Addr>(rela.r_addend) + bias != w.ifunc.address.value())
            continue;
          slot.kind = "IRELATIVE";
          w.own.push_back(slot);
          continue;
        }
        if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
        GElf_Sym sym;
        if (!symdata || !gelf_getsym(symdata, static_cast<int>(GELF_R_SYM(rela.r_info)), &sym))
          continue;
        const char* name = elf_strptr(elf, symshdr.sh_link, sym.st_name);
        if (!name || w.name != name) continue;
        slot.kind = type == R_X86_64_JUMP_SLOT ? "JUMP_SLOT" : "GLOB_DAT";
        (path == w.executable ? w.exe : w.others).push_back(slot);
      }
    }
    return DWARF_CB_OK;
  };
  dwfl_getmodules(dwfl_, visit, &walk, 0);
  std::vector<IfuncSlot> out = std::move(walk.own);
  out.insert(out.end(), walk.exe.begin(), walk.exe.end());
  out.insert(out.end(), walk.others.begin(), walk.others.end());
  return out;
}

bool ProcessSymbols::has_symtab(const std::string& module) const {
  bool found = false;
  auto visit = [](Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) -> int {
    auto* a = static_cast<std::pair<const std::string*, bool*>*>(arg);
    const char* path = module_path(mod);
    if (!path || *a->first != path) return DWARF_CB_OK;
    GElf_Addr bias;
    Elf* elf = dwfl_module_getelf(mod, &bias);
    for (Elf_Scn* scn = elf ? elf_nextscn(elf, nullptr) : nullptr; scn;
         scn = elf_nextscn(elf, scn)) {
      GElf_Shdr shdr;
      if (gelf_getshdr(scn, &shdr) && shdr.sh_type == SHT_SYMTAB) *a->second = true;
    }
    return DWARF_CB_ABORT;
  };
  std::pair<const std::string*, bool*> arg{&module, &found};
  dwfl_getmodules(dwfl_, visit, &arg, 0);
  return found;
}

std::vector<std::string> ProcessSymbols::modules() const {
  std::vector<std::string> out;
  auto visit = [](Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) -> int {
    const char* path = module_path(mod);
    if (path) static_cast<std::vector<std::string>*>(arg)->push_back(path);
    return DWARF_CB_OK;
  };
  dwfl_getmodules(dwfl_, visit, &out, 0);
  std::stable_partition(out.begin(), out.end(),
                        [&](const std::string& m) { return m == executable_; });
  return out;
}

}  // namespace probecost
