#include "tracer/symbols/usdt.hpp"

#include <fnmatch.h>
#include <gelf.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "common/error.hpp"
#include "tracer/symbols/cannot_probe.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

namespace {

constexpr std::uint32_t kNtStapsdt = 3;  // <sys/sdt.h>'s _SDT_NOTE_TYPE

std::optional<GElf_Shdr> section_named(Elf* elf, const char* wanted, Elf_Scn** out = nullptr) {
  std::size_t strndx = 0;
  if (elf_getshdrstrndx(elf, &strndx) != 0) return std::nullopt;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (!gelf_getshdr(scn, &shdr)) continue;
    const char* name = elf_strptr(elf, strndx, shdr.sh_name);
    if (name && std::strcmp(name, wanted) == 0) {
      if (out) *out = scn;
      return shdr;
    }
  }
  return std::nullopt;
}

// The three strings after the addresses: provider, name, arguments, each NUL-terminated
// within the note.
bool note_strings(const char* at, std::size_t size, std::string (&out)[3]) {
  std::size_t pos = 0;
  for (auto& s : out) {
    const void* nul = pos < size ? std::memchr(at + pos, '\0', size - pos) : nullptr;
    if (!nul) return false;
    s.assign(at + pos, static_cast<const char*>(nul));
    pos = static_cast<std::size_t>(static_cast<const char*>(nul) - at) + 1;
  }
  return true;
}

bool glob(const std::string& pattern, const std::string& s) {
  return pattern.empty() || ::fnmatch(pattern.c_str(), s.c_str(), 0) == 0;
}

}  // namespace

std::vector<UsdtProbe> read_usdt_notes(Elf* elf, std::int64_t bias, const std::string& module) {
  std::vector<UsdtProbe> out;
  Elf_Scn* scn = nullptr;
  auto notes = section_named(elf, ".note.stapsdt", &scn);
  if (!notes || notes->sh_type != SHT_NOTE) return out;
  // Where .stapsdt.base is now, against where each note says it was linked (prelink).
  auto base = section_named(elf, ".stapsdt.base");
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (!data) return out;
  GElf_Nhdr nhdr;
  std::size_t off = 0, name_off = 0, desc_off = 0;
  while ((off = gelf_getnote(data, off, &nhdr, &name_off, &desc_off)) > 0) {
    const char* desc = static_cast<const char*>(data->d_buf) + desc_off;
    if (nhdr.n_type != kNtStapsdt || nhdr.n_namesz != 8 ||
        std::memcmp(static_cast<const char*>(data->d_buf) + name_off, "stapsdt", 8) != 0 ||
        nhdr.n_descsz < 3 * 8)
      continue;
    std::uint64_t pc, link_base, sema;
    std::memcpy(&pc, desc, 8);
    std::memcpy(&link_base, desc + 8, 8);
    std::memcpy(&sema, desc + 16, 8);
    std::string strings[3];
    if (!note_strings(desc + 24, nhdr.n_descsz - 24, strings)) continue;
    if (base && link_base) pc += base->sh_addr - link_base;
    UsdtProbe p;
    p.module = module;
    p.provider = strings[0];
    p.name = strings[1];
    p.args = strings[2];
    p.address = RuntimeAddr(pc + static_cast<std::uint64_t>(bias));
    // As libbpf does, the semaphore is not moved by the base's difference: prelink moved the
    // code's addresses in the notes, and the semaphore's with them.
    if (sema) p.semaphore = RuntimeAddr(sema + static_cast<std::uint64_t>(bias));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<UsdtProbe> usdt_probes(const ProcessSymbols& symbols) {
  std::vector<UsdtProbe> out;
  symbols.for_each_elf({}, [&](const std::string& path, Elf* elf, std::int64_t bias) {
    auto got = read_usdt_notes(elf, bias, path);
    out.insert(out.end(), got.begin(), got.end());
  });
  return out;
}

bool is_usdt_spec(const std::string& text) {
  return text.rfind("usdt:", 0) == 0;
}

UsdtSpec parse_usdt_spec(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t from = 5;  // after "usdt:"
  for (std::size_t colon; (colon = text.find(':', from)) != std::string::npos; from = colon + 1)
    parts.push_back(text.substr(from, colon - from));
  parts.push_back(text.substr(from));
  auto bad = [&](const std::string& why) {
    return UsageError("bad probe '" + text + "': " + why +
                      " (want usdt:PROVIDER:NAME or usdt:MODULE:PROVIDER:NAME)");
  };
  if (parts.size() < 2 || parts.size() > 3) throw bad("not two or three parts");
  for (const auto& p : parts) {
    if (p.empty()) throw bad("an empty part");
  }
  UsdtSpec s;
  if (parts.size() == 3) s.module = parts[0];
  s.provider = parts[parts.size() - 2];
  s.name = parts.back();
  return s;
}

std::vector<UsdtProbe> find_usdt(const UsdtSpec& spec, const ProcessSymbols& symbols) {
  std::vector<UsdtProbe> out;
  symbols.for_each_elf(spec.module, [&](const std::string& path, Elf* elf, std::int64_t bias) {
    for (auto& p : read_usdt_notes(elf, bias, path)) {
      if (glob(spec.provider, p.provider) && glob(spec.name, p.name)) out.push_back(std::move(p));
    }
  });
  return out;
}

std::string usdt_providers(const std::vector<UsdtProbe>& probes) {
  std::map<std::string, std::set<std::string>> by_provider;
  for (const auto& p : probes) by_provider[p.provider].insert(p.name);
  if (by_provider.empty()) return "none";
  std::string out;
  for (const auto& [provider, names] : by_provider) {
    if (!out.empty()) out += ", ";
    out += provider + " (";
    std::string sep;
    for (const auto& n : names) {
      out += sep + n;
      sep = ", ";
    }
    out += ")";
  }
  return out;
}

std::vector<UsdtProbe> resolve_usdt(const std::string& text, const ProcessSymbols& symbols,
                                    pid_t pid) {
  UsdtSpec spec = parse_usdt_spec(text);
  if (!spec.module.empty() && !symbols.has_module(spec.module)) {
    throw UnknownModule("bad probe '" + text + "': no module '" + spec.module + "' in process " +
                        std::to_string(pid));
  }
  auto found = find_usdt(spec, symbols);
  if (!found.empty()) return found;
  std::string where = spec.module.empty() ? "" : " of " + spec.module;
  throw CannotProbe("bad probe '" + text + "': process " + std::to_string(pid) +
                    " has no USDT probe " + spec.provider + ":" + spec.name + where +
                    "; the USDT providers it has: " + usdt_providers(usdt_probes(symbols)) +
                    " ('probecost trace -l usdt:*' lists them)");
}

std::string usdt_name(const UsdtProbe& p) {
  return "usdt:" + p.module + ":" + p.provider + ":" + p.name;
}

}  // namespace probecost
