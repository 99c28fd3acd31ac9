#include "tracer/symbols.hpp"

#include <elfutils/libdwfl.h>
#include <gelf.h>

#include <algorithm>
#include <cstring>

#include "breakpoint/error.hpp"

namespace probecost {

namespace {

char* debuginfo_path = nullptr;
const Dwfl_Callbacks kProcCallbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = nullptr,
    .debuginfo_path = &debuginfo_path,
};

bool module_matches(const char* path, const std::string& wanted) {
  if (wanted.empty()) return true;
  if (!path) return false;
  if (wanted.find('/') != std::string::npos) return wanted == path;
  const char* base = std::strrchr(path, '/');
  return wanted == (base ? base + 1 : path);
}

struct FindArgs {
  const std::string* name;
  const std::string* module;
  std::vector<Symbol>* out;
};

int find_in_module(Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) {
  auto* a = static_cast<FindArgs*>(arg);
  const char* path = nullptr;
  dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &path, nullptr);
  if (!module_matches(path, *a->module)) return DWARF_CB_OK;
  int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
    if (!name || GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF) continue;
    if (*a->name != name) continue;
    a->out->push_back(Symbol{path ? path : "?", name, RuntimeAddr(addr), sym.st_size});
  }
  return DWARF_CB_OK;
}

}  // namespace

ProcessSymbols::ProcessSymbols(pid_t pid) : pid_(pid) {
  dwfl_ = dwfl_begin(&kProcCallbacks);
  if (!dwfl_) throw Error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
  // Three outcomes (elfutils tests/vdsosyms.c): 0 ok, -1 a libdwfl error, >0 an errno.
  int r = dwfl_linux_proc_report(dwfl_, pid);
  if (r != 0) {
    std::string why = r < 0 ? dwfl_errmsg(-1) : std::strerror(r);
    dwfl_end(dwfl_);
    throw Error("cannot read the modules of process " + std::to_string(pid) + ": " + why);
  }
  dwfl_report_end(dwfl_, nullptr, nullptr);
}

ProcessSymbols::~ProcessSymbols() { dwfl_end(dwfl_); }

std::vector<Symbol> ProcessSymbols::find(const std::string& name,
                                         const std::string& module) const {
  std::vector<Symbol> out;
  FindArgs args{&name, &module, &out};
  dwfl_getmodules(dwfl_, find_in_module, &args, 0);
  // The same function can appear in .symtab and .dynsym of one module: keep one.
  std::sort(out.begin(), out.end(),
            [](const Symbol& a, const Symbol& b) { return a.address < b.address; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const Symbol& a, const Symbol& b) { return a.address == b.address; }),
            out.end());
  return out;
}

Symbol ProcessSymbols::resolve(const std::string& name, const std::string& module) const {
  auto found = find(name, module);
  std::string where = module.empty() ? "" : " in module '" + module + "'";
  if (found.empty()) {
    throw UsageError("no function symbol '" + name + "'" + where + " in process " +
                     std::to_string(pid_));
  }
  if (found.size() > 1) {
    std::string list;
    for (const auto& s : found) list += "\n  " + s.address.hex() + " " + s.name + " in " + s.module;
    throw UsageError("symbol '" + name + "'" + where + " is ambiguous in process " +
                     std::to_string(pid_) + ":" + list);
  }
  return found.front();
}

}  // namespace probecost
