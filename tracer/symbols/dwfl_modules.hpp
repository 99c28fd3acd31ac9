#pragma once
// What the symbol code shares about libdwfl's modules (internal to tracer/symbols*.cpp and
// tracer/symbols/symbols_ifunc_slots.cpp).
#include <elfutils/libdwfl.h>

#include <string>
#include <vector>

#include "tracer/symbols/symbols.hpp"

namespace probecost {

// The path of the module's file ("/usr/lib/x86_64-linux-gnu/libc.so.6"), "?" when unknown.
std::string module_path(Dwfl_Module* mod);

// "libc.so.6" for "/usr/lib/x86_64-linux-gnu/libc.so.6".
std::string base_name(const std::string& path);

// A function the program can call: STT_FUNC, or STT_GNU_IFUNC (whose value is its resolver).
bool is_function(const GElf_Sym& sym);

// Calls `f(module)` for every module of `dwfl`, in libdwfl's order, until it returns false.
template <typename F>
void for_each_module(Dwfl* dwfl, F&& f) {
  auto visit = [](Dwfl_Module* mod, void**, const char*, Dwarf_Addr, void* arg) -> int {
    return (*static_cast<F*>(arg))(mod) ? DWARF_CB_OK : DWARF_CB_ABORT;
  };
  dwfl_getmodules(dwfl, visit, &f, 0);
}

// Calls `f(name, sym, addr)` for every defined function symbol of the module's symbol table
// (.symtab, of the file or its debug file, else .dynsym), `addr` its runtime address.
template <typename F>
void for_each_function_symbol(Dwfl_Module* mod, F&& f) {
  int n = dwfl_module_getsymtab(mod);
  for (int i = 1; i < n; ++i) {
    GElf_Sym sym;
    GElf_Addr addr;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
    if (name && *name && is_function(sym)) f(name, sym, addr);
  }
}

// "memcpy" for "memcpy@@GLIBC_2.14".
std::string without_version(const std::string& name);

// "memcpy@GLIBC_2.2.5": a compat version, kept for programs linked long ago.
// "memcpy@@GLIBC_2.14" (the default version) and "memcpy" are what a program linked today gets.
bool compat_version(const std::string& name);

// The same function can appear in .symtab and .dynsym of one module, and under several names
// (versions, aliases): keep one entry per address (a default-version name rather than a compat
// one, and an IFUNC when any of its names there is one), or per (address, name) for listings.
void dedupe(std::vector<Symbol>& v, bool by_address);

}  // namespace probecost
