// ProcessSymbols: the modules of a live process, and its functions looked up by name.
#include "tracer/symbols/symbols.hpp"

#include <elfutils/libdwfl.h>
#include <fnmatch.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "tracer/symbols/cxx_names.hpp"
#include "tracer/symbols/dwfl_callbacks.hpp"
#include "tracer/symbols/dwfl_modules.hpp"
#include "tracer/symbols/elf_tables.hpp"

namespace probecost {

struct ProcessSymbols::Tables {
  std::string soname;
  SymbolVersions versions;
};

struct ProcessSymbols::Function {
  const std::string& module;  // path
  const char* raw;            // as the symbol table has it
  const GElf_Sym& sym;
  RuntimeAddr address;
  const SymbolVersions& versions;

  // With the version .dynsym gives it ("memcpy@@GLIBC_2.14"): built only for the symbols
  // wanted, as most of a module's are not.
  std::string name() const { return versions.decorate(raw, address); }
  Symbol symbol() const {
    return Symbol{module, name(), address, sym.st_size, GELF_ST_TYPE(sym.st_info) == STT_GNU_IFUNC};
  }
};

namespace {

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// What groups the matches of one name: a C++ function's overloads share their qualified name.
std::string function_key(const std::string& name) {
  std::string set = overload_set(name);
  return set.empty() ? without_version(name) : set;
}

std::string listing(const std::vector<Symbol>& symbols) {
  std::string out;
  for (const auto& s : symbols) {
    out += "\n  " + s.address.hex() + " " + demangle(s.name) + " in " + s.module;
  }
  return out;
}

}  // namespace

ProcessSymbols::ProcessSymbols(pid_t pid) : pid_(pid) {
  char exe[PATH_MAX];
  std::string link = "/proc/" + std::to_string(pid) + "/exe";
  ssize_t n = ::readlink(link.c_str(), exe, sizeof exe - 1);
  if (n > 0) executable_.assign(exe, n);
  report();
}

// The new report replaces the old one only once it is whole and has modules: a refresh of a
// process that has gone (a jump probe's stacks are named after the run; a zombie's
// /proc/PID/maps reads empty) keeps the modules it had, so the names stay right.
void ProcessSymbols::report() {
  Dwfl* fresh = dwfl_begin(process_callbacks());
  if (!fresh) throw Error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
  // Three outcomes (elfutils tests/vdsosyms.c): 0 ok, -1 a libdwfl error, >0 an errno.
  int r = dwfl_linux_proc_report(fresh, pid_);
  bool any = false;
  if (r == 0) {
    dwfl_report_end(fresh, nullptr, nullptr);
    for_each_module(fresh, [&](Dwfl_Module*) { return !(any = true); });
  }
  if (r != 0 || !any) {
    std::string why = r < 0 ? dwfl_errmsg(-1) : r > 0 ? std::strerror(r) : "no module mapped";
    dwfl_end(fresh);
    throw Error("cannot read the modules of process " + std::to_string(pid_) + ": " + why);
  }
  tag_modules_with_pid(fresh, pid_);
  tables_.clear();
  if (dwfl_) dwfl_end(dwfl_);
  dwfl_ = fresh;
}

void ProcessSymbols::refresh() {
  report();
}

ProcessSymbols::~ProcessSymbols() {
  tables_.clear();
  if (dwfl_) dwfl_end(dwfl_);
}

const ProcessSymbols::Tables& ProcessSymbols::tables(Dwfl_Module* mod) const {
  auto& t = tables_[mod];
  if (!t) {
    t = std::make_unique<Tables>();
    GElf_Addr bias = 0;
    if (Elf* elf = dwfl_module_getelf(mod, &bias)) {  // the file itself, not its debug file
      t->soname = soname_of(elf);
      t->versions = SymbolVersions(elf, bias);
    }
  }
  return *t;
}

bool ProcessSymbols::module_matches(Dwfl_Module* mod, const std::string& wanted) const {
  if (wanted.empty()) return true;
  std::string path = module_path(mod);
  if (wanted.find('/') != std::string::npos) return wanted == path || same_file(wanted, path);
  return wanted == base_name(path) || wanted == tables(mod).soname;
}

bool ProcessSymbols::has_module(const std::string& module) const {
  bool found = false;
  for_each_module(dwfl_, [&](Dwfl_Module* mod) {
    found = module_matches(mod, module);
    return !found;
  });
  return found;
}

void ProcessSymbols::for_each_function(const std::string& module,
                                       const std::function<void(const Function&)>& f) const {
  for_each_module(dwfl_, [&](Dwfl_Module* mod) {
    if (!module_matches(mod, module)) return true;
    const Tables& t = tables(mod);
    std::string path = module_path(mod);
    for_each_function_symbol(mod, [&](const char* name, const GElf_Sym& sym, GElf_Addr addr) {
      f(Function{path, name, sym, RuntimeAddr(addr), t.versions});
    });
    return true;
  });
}

std::vector<Symbol> ProcessSymbols::find(const std::string& name, const std::string& module) const {
  NameQuery query(name);
  bool versioned = name.find('@') != std::string::npos;
  std::vector<Symbol> whole, by_suffix;
  for_each_function(module, [&](const Function& fn) {
    auto m = versioned ? query.match(fn.name()) : query.match(fn.raw);
    if (m != NameQuery::Match::None) {
      (m == NameQuery::Match::Suffix ? by_suffix : whole).push_back(fn.symbol());
    }
  });
  std::vector<Symbol> out = whole.empty() ? std::move(by_suffix) : std::move(whole);
  dedupe(out, true);
  if (!versioned) {
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

void ProcessSymbols::fail_not_found(const std::string& name, const std::string& module) const {
  std::string process = " in process " + std::to_string(pid_);
  if (!module.empty() && !has_module(module)) {
    std::string loaded;
    auto all = modules();
    std::erase_if(all, [](const std::string& m) { return m.rfind("[vdso", 0) == 0; });
    for (std::size_t i = 0; i < all.size() && i < 12; ++i) {
      loaded += (i ? ", " : "") + base_name(all[i]);
    }
    if (all.size() > 12) loaded += " and " + std::to_string(all.size() - 12) + " more";
    throw UnknownModule("no module '" + module + "'" + process +
                        ": it has no library or executable of that file name or SONAME loaded "
                        "(it has " +
                        loaded + ")");
  }
  std::string where = module.empty() ? "" : " in module '" + module + "'";
  std::string why;
  if (module.empty() && !executable_.empty() && !has_symtab(executable_)) {
    why = " (" + base_name(executable_) +
          " has no .symtab: it is stripped, so only its exported .dynsym symbols are known)";
  }
  throw CannotProbe("no function symbol '" + name + "'" + where + process + why);
}

std::vector<Symbol> ProcessSymbols::resolve_all(const std::string& name,
                                                const std::string& module) const {
  auto found = find(name, module);
  if (found.empty()) fail_not_found(name, module);
  std::string where = module.empty() ? "" : " in module '" + module + "'";
  std::string process = " in process " + std::to_string(pid_);
  // The executable first: a symbol it defines wins over libraries' (as the dynamic linker's
  // lookup order would have it for the executable's own calls), its first definition where it
  // has several (two files' static functions of one name). A library's must be the only one,
  // but for the overloads of one C++ function.
  const Symbol& first = found.front();
  std::vector<Symbol> one_module;
  std::copy_if(found.begin(), found.end(), std::back_inserter(one_module),
               [&](const Symbol& s) { return s.module == first.module; });
  bool overloads = std::any_of(one_module.begin(), one_module.end(),
                               [](const Symbol& s) { return !overload_set(s.name).empty(); });
  if (first.module != executable_ &&
      (one_module.size() != found.size() || (!overloads && found.size() > 1))) {
    throw CannotProbe("symbol '" + name + "'" + where + " is ambiguous" + process +
                      " (use MODULE:SYMBOL, or --all-matches):" + listing(found));
  }
  std::string key = function_key(first.name);
  for (const auto& s : one_module) {
    if (function_key(s.name) != key) {
      throw CannotProbe("symbol '" + name + "'" + where + " names several functions" + process +
                        " (give the whole name, or --all-matches):" + listing(one_module));
    }
  }
  return overloads ? one_module : std::vector<Symbol>{first};
}

Symbol ProcessSymbols::resolve(const std::string& name, const std::string& module) const {
  auto all = resolve_all(name, module);
  if (all.size() > 1) {
    throw CannotProbe("symbol '" + name + "' is overloaded in process " + std::to_string(pid_) +
                      " (give the parameter list, as in '" + demangle(all.front().name) +
                      "'):" + listing(all));
  }
  return all.front();
}

std::vector<Symbol> ProcessSymbols::list(const std::string& pattern) const {
  auto matches = [&](const std::string& name) {
    return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
  };
  std::vector<Symbol> out;
  for_each_function({}, [&](const Function& fn) {
    std::string name = fn.name(), base = without_version(name);
    if (matches(name) || matches(base) || matches(demangle(base)) || matches(overload_set(base))) {
      out.push_back(fn.symbol());
    }
  });
  dedupe(out, false);
  std::sort(out.begin(), out.end(), [](const Symbol& a, const Symbol& b) {
    return std::tie(a.module, a.name) < std::tie(b.module, b.name);
  });
  return out;
}

std::vector<std::string> ProcessSymbols::modules() const {
  std::vector<std::string> out;
  for_each_module(dwfl_, [&](Dwfl_Module* mod) {
    out.push_back(module_path(mod));
    return true;
  });
  std::stable_partition(out.begin(), out.end(),
                        [&](const std::string& m) { return m == executable_; });
  return out;
}

void ProcessSymbols::for_each_elf(
    const std::string& module,
    const std::function<void(const std::string&, Elf*, std::int64_t)>& f) const {
  for (int pass = 0; pass < 2; ++pass) {  // the executable, then the libraries
    for_each_module(dwfl_, [&](Dwfl_Module* mod) {
      std::string path = module_path(mod);
      if ((path == executable_) != (pass == 0) || !module_matches(mod, module)) return true;
      GElf_Addr bias = 0;
      if (Elf* elf = dwfl_module_getelf(mod, &bias))  // the file itself, not its debug file
        f(path, elf, static_cast<std::int64_t>(bias));
      return true;
    });
  }
}

}  // namespace probecost
