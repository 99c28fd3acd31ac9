// ProcessSymbols::ifunc_slots: the relocated pointer slots that may hold what an IFUNC resolved
// to (tracer/symbols/ifunc.hpp reads them).
#include "tracer/symbols/dwfl_modules.hpp"
#include "tracer/symbols/elf_tables.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

namespace {

struct SlotWalk {
  const Symbol& ifunc;
  std::string name;  // without its version: relocations name the symbol without one
  const std::string& executable;
  std::vector<IfuncSlot> own, exe, others;

  // One relocation of a module loaded at `bias`: kept when its slot may hold the implementation.
  void add(const GElf_Rela& rela, GElf_Addr bias, const IfuncSlot& slot, const char* symbol_name) {
    auto type = GELF_R_TYPE(rela.r_info);
    if (type == R_X86_64_IRELATIVE) {
      // The defining module's own calls: the addend is the resolver.
      if (slot.module == ifunc.module &&
          RuntimeAddr(static_cast<GElf_Addr>(rela.r_addend) + bias) == ifunc.address) {
        own.push_back(slot);
        own.back().kind = "IRELATIVE";
      }
      return;
    }
    if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || !symbol_name ||
        name != symbol_name)
      return;
    auto& to = slot.module == executable ? exe : others;
    to.push_back(slot);
    to.back().kind = type == R_X86_64_JUMP_SLOT ? "JUMP_SLOT" : "GLOB_DAT";
  }
};

// The name of the symbol a relocation refers to, from the section's linked symbol table.
const char* relocation_symbol(Elf* elf, const GElf_Shdr& shdr, const GElf_Rela& rela) {
  Elf_Scn* symscn = elf_getscn(elf, shdr.sh_link);
  GElf_Shdr symshdr;
  Elf_Data* symdata = symscn ? elf_getdata(symscn, nullptr) : nullptr;
  GElf_Sym sym;
  if (!symdata || !gelf_getshdr(symscn, &symshdr) ||
      !gelf_getsym(symdata, static_cast<int>(GELF_R_SYM(rela.r_info)), &sym))
    return nullptr;
  return elf_strptr(elf, symshdr.sh_link, sym.st_name);
}

void walk_module(Dwfl_Module* mod, SlotWalk& w) {
  std::string path = module_path(mod);
  GElf_Addr bias = 0;
  Elf* elf = dwfl_module_getelf(mod, &bias);
  if (!elf) return;
  auto plt = plt_ranges(elf, bias);
  for (auto& [scn, shdr] : sections_of_type(elf, SHT_RELA)) {
    Elf_Data* data = elf_getdata(scn, nullptr);
    std::size_t entsize = shdr.sh_entsize ? shdr.sh_entsize : sizeof(Elf64_Rela);
    for (std::size_t i = 0; data && i < shdr.sh_size / entsize; ++i) {
      GElf_Rela rela;
      if (!gelf_getrela(data, static_cast<int>(i), &rela)) break;
      IfuncSlot slot{RuntimeAddr(rela.r_offset + bias), path, "", plt};
      bool by_name = GELF_R_TYPE(rela.r_info) != R_X86_64_IRELATIVE;
      w.add(rela, bias, slot, by_name ? relocation_symbol(elf, shdr, rela) : nullptr);
    }
  }
}

}  // namespace

std::vector<IfuncSlot> ProcessSymbols::ifunc_slots(const Symbol& ifunc) const {
  SlotWalk walk{ifunc, without_version(ifunc.name), executable_, {}, {}, {}};
  for_each_module(dwfl_, [&](Dwfl_Module* mod) {
    walk_module(mod, walk);
    return true;
  });
  std::vector<IfuncSlot> out = std::move(walk.own);
  out.insert(out.end(), walk.exe.begin(), walk.exe.end());
  out.insert(out.end(), walk.others.begin(), walk.others.end());
  return out;
}

}  // namespace probecost
