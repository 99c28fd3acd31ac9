#include "tracer/symbols/probes.hpp"

#include <algorithm>
#include <cstdlib>

#include "breakpoint/x86/decoder.hpp"
#include "common/error.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/symbols/cannot_probe.hpp"
#include "tracer/symbols/cxx_names.hpp"
#include "tracer/symbols/dwfl_modules.hpp"
#include "tracer/symbols/usdt.hpp"

namespace probecost {

namespace {

bool parse_number(const std::string& s, std::uint64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoull(s.c_str(), &end, 0);  // 0x.. hex, else decimal (or 0.. octal)
  return errno == 0 && *end == '\0' && s[0] != '-';
}

std::string perms(const Mapping& m) {
  return std::string(m.read ? "r" : "-") + (m.write ? "w" : "-") + (m.exec ? "x" : "-");
}

// The ':' after MODULE: a single one ("libc.so.6:malloc"), not one of a C++ scope's "::"
// ("ns::Klass::method", "libfoo.so:ns::f"), and before any '(', '<' or '[' (the ':' of
// "f[abi:cxx11]()" is the name's own).
std::size_t module_separator(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '(' || c == '<' || c == '[') break;
    if (c != ':') continue;
    if (i + 1 < text.size() && text[i + 1] == ':') {
      ++i;  // a scope
      continue;
    }
    return i;
  }
  return std::string::npos;
}

}  // namespace

ProbeSpec parse_probe(const std::string& text) {
  ProbeSpec p;
  p.text = text;
  if (is_usdt_spec(text)) {
    UsdtSpec u = parse_usdt_spec(text);
    p.usdt = true;
    p.module = u.module;
    p.symbol = u.provider + ":" + u.name;
    return p;
  }
  auto bad = [&](const std::string& why) {
    return UsageError("bad probe '" + text + "': " + why +
                      " (want SYMBOL, MODULE:SYMBOL, SYMBOL+OFFSET or 0xADDRESS)");
  };
  if (text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0) {
    std::uint64_t a;
    if (!parse_number(text, a)) throw bad("not a hexadecimal address");
    p.address = RuntimeAddr(a);
    return p;
  }
  std::string rest = text;
  if (auto colon = module_separator(rest); colon != std::string::npos) {
    p.module = rest.substr(0, colon);
    rest = rest.substr(colon + 1);
    if (p.module.empty()) throw bad("empty module");
  }
  if (auto plus = rest.rfind('+'); plus != std::string::npos) {
    // C++ operators have '+' of their own: "A::operator+(A const&)", "operator++".
    if (parse_number(rest.substr(plus + 1), p.offset)) {
      rest = rest.substr(0, plus);
    } else if (rest.find("operator") == std::string::npos) {
      throw bad("bad offset");
    }
  }
  if (rest.empty()) throw bad("no symbol");
  p.symbol = rest;
  return p;
}

void check_placement(RuntimeAddr at, const ProcessSymbols& symbols, TraceeMemory& memory, pid_t pid,
                     bool function_start) {
  std::string where = " in process " + std::to_string(pid);
  const Mapping* map = nullptr;
  auto maps = read_maps(pid);
  for (const auto& m : maps) {
    if (m.contains(at)) map = &m;
  }
  if (!map) throw CannotProbe("address " + at.hex() + " is not mapped" + where);
  if (!map->exec) {
    throw CannotProbe("address " + at.hex() + where + " is not executable: it is in " +
                      (map->path.empty() ? "an anonymous mapping" : map->path) + " (" +
                      perms(*map) + ")");
  }
  auto sym = symbols.containing(at);
  if (!sym && function_start) return;
  if (!sym) {
    throw CannotProbe("cannot check that " + at.hex() + where +
                      " is an instruction boundary: no function symbol covers it");
  }
  // Decode from the symbol's first instruction on: the address must be where one starts.
  std::vector<std::uint8_t> code(static_cast<std::size_t>(at - sym->address) + 15);
  memory.read(sym->address, code);
  RuntimeAddr pos = sym->address;
  while (pos < at) {
    std::size_t off = static_cast<std::size_t>(pos - sym->address);
    auto in = decode(std::span(code).subspan(off), pos);
    if (!in) {
      throw CannotProbe("cannot decode " + sym->name + " at " + pos.hex() + where +
                        " to check the probe address " + at.hex());
    }
    if (in->next() > at) {
      throw CannotProbe("address " + at.hex() + where + " is inside the instruction at " +
                        pos.hex() + " (" + symbols.describe(pos) + ": " + in->quoted() + ", " +
                        std::to_string(in->length) + " bytes)");
    }
    pos = in->next();
  }
}

namespace {

std::string plus_offset(std::uint64_t offset) {
  if (!offset) return "";
  char off[24];
  std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(offset));
  return off;
}

// One address a spec names: the symbol it came from (none for 0xADDRESS), and for an IFUNC
// the implementation it resolved to.
struct Target {
  RuntimeAddr address;
  std::optional<Symbol> symbol;
  std::optional<IfuncTarget> ifunc;
};

Target target_of(const Symbol& s, const ProbeSpec& spec, const ProcessSymbols& symbols,
                 TraceeMemory& memory, pid_t pid, const ResolverCall& call_resolver) {
  Target t{s.address, s, std::nullopt};
  std::uint64_t size = s.size;
  if (s.ifunc) {
    t.ifunc = resolve_ifunc(s, symbols, memory, call_resolver, pid);
    t.address = t.ifunc->address;
    auto impl = symbols.containing(t.address);
    size = impl && impl->address == t.address ? impl->size : 0;
  }
  if (spec.offset && size && spec.offset >= size) {
    throw CannotProbe("bad probe '" + spec.text + "': offset " + std::to_string(spec.offset) +
                      " is past the end of " + (t.ifunc ? t.ifunc->name : s.name) + " (" +
                      std::to_string(size) + " bytes)");
  }
  t.address = t.address + static_cast<std::int64_t>(spec.offset);
  return t;
}

std::vector<Target> targets_of(const ProbeSpec& spec, const ProcessSymbols& symbols,
                               TraceeMemory& memory, pid_t pid, bool all_matches,
                               const ResolverCall& call_resolver) {
  if (spec.address) return {Target{*spec.address, std::nullopt, std::nullopt}};
  std::vector<Symbol> found;
  if (all_matches) {
    found = symbols.find(spec.symbol, spec.module);
    if (found.empty()) symbols.resolve_all(spec.symbol, spec.module);  // throws the clear error
  } else {
    found = symbols.resolve_all(spec.symbol, spec.module);  // a C++ name: every overload
  }
  std::vector<Target> out;
  for (const auto& s : found)
    out.push_back(target_of(s, spec, symbols, memory, pid, call_resolver));
  return out;
}

ResolvedProbe describe_target(const Target& t, const ProbeSpec& spec, const ProcessSymbols& symbols,
                              bool all_matches) {
  ResolvedProbe p;
  p.spec = spec.text;
  p.address = t.address;
  auto sym = symbols.containing(t.address);
  if (t.ifunc) {
    p.module = symbols.module_at(t.address);
    p.symbol = (all_matches ? t.symbol->name : spec.symbol) + plus_offset(spec.offset);
    p.implementation =
        (t.ifunc->name.empty() ? t.ifunc->address.hex() : t.ifunc->name) + plus_offset(spec.offset);
    p.resolved_by = t.ifunc->resolved_by;
  } else if (sym && !spec.symbol.empty() && !all_matches) {
    // The name the user gave, not whichever alias (__libc_malloc) the table lists first; a C++
    // function by its whole demangled name, which tells its overloads apart.
    std::string demangled = demangle(without_version(t.symbol->name));
    p.module = sym->module;
    p.symbol = (demangled != without_version(t.symbol->name) ? demangled : spec.symbol) +
               plus_offset(spec.offset);
  } else if (sym) {
    p.module = sym->module;
    p.symbol =
        demangle(sym->name) + plus_offset(static_cast<std::uint64_t>(t.address - sym->address));
  }
  bool at_start = t.ifunc ? !spec.offset : (sym && sym->address == t.address);
  if (at_start) p.names = symbols.names_at(t.address);
  return p;
}

// A USDT site is a 1-byte nop that the note says is there (no symbol needed to find the
// instruction boundary: python3 has no symbol for most of its code), in executable code.
void check_usdt_site(const UsdtProbe& u, TraceeMemory& memory, pid_t pid) {
  std::string where = u.provider + ":" + u.name + " at " + u.address.hex() + " in process " +
                      std::to_string(pid) + " (" + u.module + ")";
  const Mapping* map = nullptr;
  auto maps = read_maps(pid);
  for (const auto& m : maps) {
    if (m.contains(u.address)) map = &m;
  }
  if (!map || !map->exec) throw CannotProbe(where + " is not in executable code");
  std::uint8_t byte = memory.read_byte(u.address);
  if (byte == 0xCC) {
    throw SiteOccupied(where + " holds an int3 already: another tracer's (a kernel uprobe: " +
                       "bpftrace, perf probe) or one a killed probecost left " +
                       "('probecost restore -p " + std::to_string(pid) + "' tells)");
  }
  if (byte != 0x90) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", byte);
    throw CannotProbe(where + " is not the nop its note describes (the byte there is " + hex + ")");
  }
}

std::vector<ResolvedProbe> resolve_usdt_spec(const std::string& text, const ProcessSymbols& symbols,
                                             TraceeMemory& memory, pid_t pid) {
  std::vector<ResolvedProbe> out;
  for (const UsdtProbe& u : resolve_usdt(text, symbols, pid)) {
    check_usdt_site(u, memory, pid);
    ResolvedProbe p;
    p.spec = text;
    p.address = u.address;
    p.module = u.module;
    p.symbol = u.provider + ":" + u.name;
    p.usdt = true;
    p.semaphore = u.semaphore;
    p.usdt_args = u.args;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

void merge_same_address(std::vector<ResolvedProbe>& probes) {
  std::vector<ResolvedProbe> out;
  for (auto& p : probes) {
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const ResolvedProbe& q) { return q.address == p.address; });
    if (same == out.end()) {
      out.push_back(std::move(p));
      continue;
    }
    same->spec += ", " + p.spec;
    for (const auto& name : p.names) {
      if (std::find(same->names.begin(), same->names.end(), name) == same->names.end()) {
        same->names.push_back(name);
      }
    }
  }
  probes = std::move(out);
}

std::vector<ResolvedProbe> resolve_probes(const std::vector<std::string>& specs,
                                          const ProcessSymbols& symbols, TraceeMemory& memory,
                                          pid_t pid, bool all_matches,
                                          const ResolverCall& call_resolver) {
  std::vector<ResolvedProbe> out;
  for (const auto& text : specs) {
    if (is_usdt_spec(text)) {
      auto got = resolve_usdt_spec(text, symbols, memory, pid);
      out.insert(out.end(), got.begin(), got.end());
      continue;
    }
    ProbeSpec spec = parse_probe(text);
    for (const Target& t : targets_of(spec, symbols, memory, pid, all_matches, call_resolver)) {
      try {
        check_placement(t.address, symbols, memory, pid, t.ifunc && !spec.offset);
      } catch (const CannotProbe& e) {
        throw CannotProbe("bad probe '" + text + "': " + e.what());
      }
      out.push_back(describe_target(t, spec, symbols, all_matches));
    }
  }
  return out;
}

}  // namespace probecost
