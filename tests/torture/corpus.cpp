#include "corpus.hpp"

#include <gelf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "breakpoint/x86/decoder.hpp"
#include "uprobe/uprobe.hpp"

namespace torture {

const std::vector<Program>& programs() {
  // C at three optimisation levels, PIE or not, with and without CET's endbr64; the short form
  // keeps -O2, PIE, CET. Then C++ exceptions, hand-written assembly, fault handlers, a handler
  // parked over a probed range, and a process that may map nothing executable.
  static const std::vector<Program> all = [] {
    std::vector<Program> p;
    for (const char* opt : {"O0", "O2", "O3"}) {
      for (const char* pie : {"pie", "nopie"}) {
        for (const char* cf : {"cf", "nocf"}) {
          std::string name = std::string("c_") + opt + "_" + pie + "_" + cf;
          p.push_back({name, false, name == "c_O2_pie_cf"});
        }
      }
    }
    p.push_back({"c_mdwe", false, false});
    p.push_back({"cxx_O0", false, true});
    p.push_back({"cxx_O2", false, false});
    p.push_back({"asm", false, true});
    p.push_back({"safefetch", false, true});
    p.push_back({"parked", true, true});
    return p;
  }();
  return all;
}

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// An ELF image read through libelf, closed with it.
class ElfImage {
 public:
  explicit ElfImage(std::vector<char>& image) {
    elf_version(EV_CURRENT);
    elf_ = elf_memory(image.data(), image.size());
    if (!elf_ || elf_kind(elf_) != ELF_K_ELF) throw std::runtime_error("not an ELF file");
  }
  ~ElfImage() { elf_end(elf_); }
  ElfImage(const ElfImage&) = delete;
  ElfImage& operator=(const ElfImage&) = delete;

  // The file offset of `vaddr`, through the PT_LOAD segment that maps it.
  std::uint64_t file_offset(std::uint64_t vaddr) const {
    std::size_t n = 0;
    if (elf_getphdrnum(elf_, &n) != 0) throw std::runtime_error("no program headers");
    for (std::size_t i = 0; i < n; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf_, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD &&
          vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz)
        return vaddr - ph.p_vaddr + ph.p_offset;
    }
    throw std::runtime_error("no segment maps " + std::to_string(vaddr));
  }

  // The function symbols of .symtab named t_*, with a size, at their file addresses.
  // (read_elf_symbols of tracer/ goes through libdwfl, whose offline layout moves a PIE.)
  std::vector<Function> torture_functions() const {
    std::vector<Function> out;
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf_, scn));) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || sh.sh_entsize == 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      for (std::size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; ++i) {
        GElf_Sym sym;
        if (!gelf_getsym(data, static_cast<int>(i), &sym)) continue;
        const char* name = elf_strptr(elf_, sh.sh_link, sym.st_name);
        if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_size == 0 || !name ||
            std::strncmp(name, "t_", 2) != 0)
          continue;
        Function f;
        f.name = name;
        f.address = sym.st_value;
        f.size = sym.st_size;
        out.push_back(std::move(f));
      }
    }
    return out;
  }

 private:
  Elf* elf_ = nullptr;
};

// What this CPU lacks for the function, by the corpus's naming: empty if nothing.
std::string missing_feature(const std::string& name) {
  __builtin_cpu_init();
  if (name.find("avx512") != std::string::npos && !__builtin_cpu_supports("avx512f"))
    return "this CPU has no AVX-512F (the program does not call it either)";
  if (name.find("avx2") != std::string::npos && !__builtin_cpu_supports("avx2"))
    return "this CPU has no AVX2 (the program does not call it either)";
  return "";
}

void decode_all(Function& f, const std::vector<char>& image, const std::string& path) {
  std::uint32_t off = 0;
  bool after_syscall = false;
  while (off < f.size) {
    std::size_t at = f.file_offset + off;
    std::size_t len = std::min<std::size_t>(15, image.size() - at);
    auto bytes = std::span(reinterpret_cast<const std::uint8_t*>(image.data()) + at, len);
    auto insn = probecost::decode(bytes, probecost::RuntimeAddr(f.address + off));
    if (!insn) {
      throw std::runtime_error(path + ": " + f.name + "+" + std::to_string(off) +
                               " does not decode");
    }
    f.boundaries.push_back(off);
    f.texts.push_back(insn->text());
    auto kernel = probecost::uprobe_handling(bytes, insn->address);
    f.uncounted.push_back(!kernel.harms.empty() ? "the kernel's uprobe harms: " + kernel.harms
                          : after_syscall ? "the kernel's uprobe after a probed syscall never fires"
                                          : kernel.count_differs);
    after_syscall = insn->flow == probecost::Instruction::Flow::SystemCall;
    off += insn->length;
  }
}

}  // namespace

std::vector<Function> functions_of(const std::string& path) {
  auto image = read_file(path);
  ElfImage elf(image);
  std::vector<Function> out = elf.torture_functions();
  for (auto& f : out) {
    f.file_offset = elf.file_offset(f.address);
    f.skipped = missing_feature(f.name);
    decode_all(f, image, path);
  }
  for (auto& f : out) {
    f.has_cold_part = std::any_of(out.begin(), out.end(),
                                  [&](const Function& g) { return g.name == f.name + ".cold"; });
  }
  std::sort(out.begin(), out.end(),
            [](const Function& a, const Function& b) { return a.address < b.address; });
  return out;
}

}  // namespace torture
