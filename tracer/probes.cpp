#include "tracer/probes.hpp"

#include <cstdlib>

#include "breakpoint/decoder.hpp"
#include "breakpoint/error.hpp"
#include "tracer/maps.hpp"

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

}  // namespace

ProbeSpec parse_probe(const std::string& text) {
  ProbeSpec p;
  p.text = text;
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
  if (auto colon = rest.find(':'); colon != std::string::npos) {
    p.module = rest.substr(0, colon);
    rest = rest.substr(colon + 1);
    if (p.module.empty()) throw bad("empty module");
  }
  if (auto plus = rest.rfind('+'); plus != std::string::npos) {
    if (!parse_number(rest.substr(plus + 1), p.offset)) throw bad("bad offset");
    rest = rest.substr(0, plus);
  }
  if (rest.empty()) throw bad("no symbol");
  p.symbol = rest;
  return p;
}

void check_placement(RuntimeAddr at, const ProcessSymbols& symbols, TraceeMemory& memory,
                     pid_t pid) {
  std::string where = " in process " + std::to_string(pid);
  const Mapping* map = nullptr;
  auto maps = read_maps(pid);
  for (const auto& m : maps) {
    if (m.contains(at)) map = &m;
  }
  if (!map) throw UsageError("address " + at.hex() + " is not mapped" + where);
  if (!map->exec) {
    throw UsageError("address " + at.hex() + where + " is not executable: it is in " +
                     (map->path.empty() ? "an anonymous mapping" : map->path) + " (" + perms(*map) +
                     ")");
  }
  auto sym = symbols.containing(at);
  if (!sym) {
    throw UsageError("cannot check that " + at.hex() + where +
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
      throw UsageError("cannot decode " + sym->name + " at " + pos.hex() + where +
                       " to check the probe address " + at.hex());
    }
    if (in->next() > at) {
      throw UsageError("address " + at.hex() + where + " is inside the instruction at " +
                       pos.hex() + " (" + symbols.describe(pos) + ": '" + in->text + "', " +
                       std::to_string(in->length) + " bytes)");
    }
    pos = in->next();
  }
}

std::vector<ResolvedProbe> resolve_probes(const std::vector<std::string>& specs,
                                          const ProcessSymbols& symbols, TraceeMemory& memory,
                                          pid_t pid, bool all_matches) {
  std::vector<ResolvedProbe> out;
  for (const auto& text : specs) {
    ProbeSpec spec = parse_probe(text);
    std::vector<RuntimeAddr> addrs;
    if (spec.address) {
      addrs.push_back(*spec.address);
    } else if (all_matches) {
      auto found = symbols.find(spec.symbol, spec.module);
      if (found.empty()) symbols.resolve(spec.symbol, spec.module);  // throws the clear error
      for (const auto& s : found)
        addrs.push_back(s.address + static_cast<std::int64_t>(spec.offset));
    } else {
      Symbol s = symbols.resolve(spec.symbol, spec.module);
      if (spec.offset && s.size && spec.offset >= s.size) {
        throw UsageError("bad probe '" + text + "': offset " + std::to_string(spec.offset) +
                         " is past the end of " + s.name + " (" + std::to_string(s.size) +
                         " bytes)");
      }
      addrs.push_back(s.address + static_cast<std::int64_t>(spec.offset));
    }
    for (RuntimeAddr a : addrs) {
      try {
        check_placement(a, symbols, memory, pid);
      } catch (const UsageError& e) {
        throw UsageError("bad probe '" + text + "': " + e.what());
      }
      ResolvedProbe p{text, a, "", ""};
      if (auto sym = symbols.containing(a); sym && !spec.symbol.empty() && !all_matches) {
        // The name the user gave, not whichever alias (__libc_malloc) the table lists first.
        p.module = sym->module;
        p.symbol = spec.symbol;
        if (spec.offset) {
          char off[24];
          std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(spec.offset));
          p.symbol += off;
        }
      } else if (sym) {
        p.module = sym->module;
        p.symbol = sym->name;
        if (a != sym->address) {
          char off[24];
          std::snprintf(off, sizeof off, "+0x%llx",
                        static_cast<unsigned long long>(a - sym->address));
          p.symbol += off;
        }
      }
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace probecost
