#include "tracer/symbols/elf_tables.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace probecost {

std::vector<std::pair<Elf_Scn*, GElf_Shdr>> sections_of_type(Elf* elf, GElf_Word type) {
  std::vector<std::pair<Elf_Scn*, GElf_Shdr>> out;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) && shdr.sh_type == type) out.emplace_back(scn, shdr);
  }
  return out;
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

std::string soname_of(Elf* elf) {
  for (auto& [scn, shdr] : sections_of_type(elf, SHT_DYNAMIC)) {
    Elf_Data* data = elf_getdata(scn, nullptr);
    std::size_t entsize = shdr.sh_entsize ? shdr.sh_entsize : sizeof(Elf64_Dyn);
    for (std::size_t i = 0; data && i < shdr.sh_size / entsize; ++i) {
      GElf_Dyn dyn;
      if (!gelf_getdyn(data, static_cast<int>(i), &dyn) || dyn.d_tag == DT_NULL) break;
      if (dyn.d_tag != DT_SONAME) continue;
      const char* name = elf_strptr(elf, shdr.sh_link, dyn.d_un.d_val);
      return name ? name : "";
    }
  }
  return "";
}

namespace {

// Not in <elf.h>: the bit of a .gnu.version entry that marks a non-default version.
constexpr GElf_Versym kVersymHidden = 0x8000;

// Version index -> name, from .gnu.version_d (the versions this file defines). The entry with
// VER_FLG_BASE names the file itself, not a version.
std::map<GElf_Half, std::string> defined_versions(Elf* elf) {
  std::map<GElf_Half, std::string> out;
  for (auto& [scn, shdr] : sections_of_type(elf, SHT_GNU_verdef)) {
    Elf_Data* data = elf_getdata(scn, nullptr);
    int offset = 0;
    for (std::size_t n = 0; data && n < shdr.sh_info; ++n) {
      GElf_Verdef def;
      GElf_Verdaux aux;
      if (!gelf_getverdef(data, offset, &def)) break;
      if (!(def.vd_flags & VER_FLG_BASE) &&
          gelf_getverdaux(data, offset + static_cast<int>(def.vd_aux), &aux)) {
        if (const char* name = elf_strptr(elf, shdr.sh_link, aux.vda_name)) out[def.vd_ndx] = name;
      }
      if (!def.vd_next) break;
      offset += static_cast<int>(def.vd_next);
    }
  }
  return out;
}

}  // namespace

SymbolVersions::SymbolVersions(Elf* elf, GElf_Addr bias) {
  auto names = defined_versions(elf);
  auto versym = sections_of_type(elf, SHT_GNU_versym);
  auto dynsym = sections_of_type(elf, SHT_DYNSYM);
  if (names.empty() || versym.empty() || dynsym.empty()) return;
  Elf_Data* versions = elf_getdata(versym.front().first, nullptr);
  auto& [scn, shdr] = dynsym.front();
  for_each_symbol(elf, scn, shdr, [&](std::size_t i, const char* name, const GElf_Sym& sym) {
    GElf_Versym v;
    if (sym.st_shndx == SHN_UNDEF || !versions ||
        !gelf_getversym(versions, static_cast<int>(i), &v))
      return;
    auto version = names.find(static_cast<GElf_Half>(v & ~kVersymHidden));
    if (version == names.end()) return;  // local, global without a version, or a needed one
    std::string decorated =
        std::string(name) + ((v & kVersymHidden) ? "@" : "@@") + version->second;
    auto& here = at_[sym.st_value + bias];
    auto same =
        std::find_if(here.begin(), here.end(), [&](const auto& e) { return e.first == name; });
    // Two versions of one name at one address (an alias kept for old programs): the default wins.
    if (same == here.end()) {
      here.emplace_back(name, decorated);
    } else if (!(v & kVersymHidden)) {
      same->second = decorated;
    }
  });
}

std::string SymbolVersions::decorate(std::string_view name, RuntimeAddr at) const {
  auto here = at_.find(at.value());
  if (here == at_.end()) return std::string(name);
  for (const auto& [plain, decorated] : here->second) {
    if (plain == name) return decorated;  // never one with a version already: that has an '@'
  }
  return std::string(name);
}

}  // namespace probecost
