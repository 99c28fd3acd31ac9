#include "tracer/jump/module_code.hpp"

#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/error.hpp"
#include "common/fd.hpp"
#include "tracer/jump/branch_cache.hpp"

namespace probecost {

namespace {

struct ElfFile {
  Elf* elf;
  ~ElfFile() { elf_end(elf); }
};

// The GNU build-id note, in hex; empty when the file has none.
std::string build_id(Elf* elf) {
  const void* id = nullptr;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
  std::string hex;
  for (ssize_t i = 0; i < n; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<const unsigned char*>(id)[i]);
    hex += b;
  }
  return hex;
}

std::span<const std::uint8_t> raw(Elf_Data* d) {
  if (!d || !d->d_buf) return {};
  return {static_cast<const std::uint8_t*>(d->d_buf), d->d_size};
}

}  // namespace

ModuleCode::ModuleCode(int fd, std::string name) : name_(std::move(name)) {
  elf_version(EV_CURRENT);
  ElfFile file{elf_begin(fd, ELF_C_READ_MMAP, nullptr)};
  GElf_Ehdr ehdr;
  std::size_t phnum = 0, shstrndx = 0;
  if (!file.elf || elf_kind(file.elf) != ELF_K_ELF || !gelf_getehdr(file.elf, &ehdr) ||
      elf_getphdrnum(file.elf, &phnum) != 0) {
    throw Error(name_ + " cannot be read as an ELF file: " + elf_errmsg(-1));
  }
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (!gelf_getphdr(file.elf, static_cast<int>(i), &ph) || ph.p_type != PT_LOAD) continue;
    Segment s{FileAddr(ph.p_vaddr), ph.p_offset, ph.p_filesz, (ph.p_flags & PF_X) != 0, {}};
    if (s.exec) {
      auto bytes = raw(elf_getdata_rawchunk(file.elf, static_cast<int64_t>(ph.p_offset),
                                            ph.p_filesz, ELF_T_BYTE));
      if (bytes.size() != ph.p_filesz) throw Error(name_ + ": a code segment is truncated");
      s.bytes.assign(bytes.begin(), bytes.end());
    }
    segments_.push_back(std::move(s));
  }
  index_branches(build_id(file.elf));
  // The sections LSDAs may be in, and .eh_frame (a file without section headers has none to
  // name: then no landing pad is known, as the unwinder knows none without .eh_frame either,
  // .eh_frame_hdr only indexes it).
  std::vector<LoadedBytes> sections;
  std::optional<LoadedBytes> eh_frame;
  if (elf_getshdrstrndx(file.elf, &shstrndx) == 0) {
    for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(file.elf, scn));) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC) || sh.sh_type == SHT_NOBITS)
        continue;
      LoadedBytes b{FileAddr(sh.sh_addr), raw(elf_rawdata(scn, nullptr))};
      sections.push_back(b);
      const char* n = elf_strptr(file.elf, shstrndx, sh.sh_name);
      if (n && std::strcmp(n, ".eh_frame") == 0) eh_frame = b;
    }
  }
  if (eh_frame) eh_ = read_eh_tables(*eh_frame, sections, ehdr.e_type == ET_EXEC);
}

// Every direct branch of the code segments, from the cache when this build's index is there.
void ModuleCode::index_branches(const std::string& id) {
  std::uint64_t code = 0;
  for (const auto& s : segments_) code += s.bytes.size();
  if (auto cached = load_branches(id, code)) {
    branches_ = std::move(*cached);
    return;
  }
  for (const auto& s : segments_) {
    if (s.exec) branches_.add(s.bytes, s.vaddr);
  }
  branches_.sort();
  store_branches(id, code, branches_);
}

namespace {
std::map<std::string, std::shared_ptr<const ModuleCode>> by_file;
}  // namespace

std::uint64_t ModuleCode::files_read() {
  return by_file.size();
}

std::shared_ptr<const ModuleCode> ModuleCode::of(pid_t pid, const Mapping& m, std::string& why) {
  Fd fd(open_mapped_file(pid, m));
  if (!fd) {
    why = "cannot open " + m.path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  ::fstat(fd.get(), &st);
  std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + "@" +
                    std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
                    std::to_string(st.st_mtim.tv_nsec);
  auto it = by_file.find(key);
  if (it == by_file.end()) {
    try {
      it = by_file.emplace(key, std::make_shared<ModuleCode>(fd.get(), m.path)).first;
    } catch (const Error& e) {
      why = e.what();
      return nullptr;
    }
  }
  return it->second;
}

std::optional<LoadBias> ModuleCode::bias(const Mapping& m) const {
  for (const auto& s : segments_) {
    // A segment's mapping starts at its offset rounded down to a page.
    std::uint64_t first = s.offset & ~std::uint64_t{4095};
    if (s.exec != m.exec || m.offset < first || m.offset >= s.offset + s.filesz) continue;
    FileAddr at = s.vaddr + static_cast<std::int64_t>(m.offset - s.offset);
    return LoadBias(static_cast<std::int64_t>(m.start.value() - at.value()));
  }
  return std::nullopt;
}

bool ModuleCode::read(FileAddr at, std::span<std::uint8_t> out) const {
  for (const auto& s : segments_) {
    if (!s.exec || at < s.vaddr) continue;
    auto off = static_cast<std::uint64_t>(at - s.vaddr);
    if (off > s.bytes.size() || out.size() > s.bytes.size() - off) continue;
    std::copy_n(s.bytes.begin() + static_cast<std::ptrdiff_t>(off), out.size(), out.begin());
    return true;
  }
  return false;
}

std::optional<LandingPad> ModuleCode::landing_pad_in(FileAddr lo, FileAddr hi) const {
  auto it = std::lower_bound(eh_.pads.begin(), eh_.pads.end(), lo,
                             [](const LandingPad& p, FileAddr a) { return p.pad < a; });
  if (it == eh_.pads.end() || it->pad >= hi) return std::nullopt;
  return *it;
}

std::string ModuleCode::unknown_pads_in(FileAddr lo, FileAddr hi) const {
  for (const auto& [a, b] : eh_.unknown) {
    if (a < hi && lo < b) return eh_.why_unknown;
  }
  return {};
}

}  // namespace probecost
