#include "tracer/core/unwind_tables.hpp"

#include <elf.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace probecost {

namespace {

constexpr std::uint8_t kOmit = 0xff;            // DW_EH_PE_omit
constexpr std::uint8_t kDatarelSdata4 = 0x3b;   // DW_EH_PE_datarel | DW_EH_PE_sdata4
constexpr std::uint64_t kPageMask = ~0xfffull;  // the loader maps segments page by page

// The size of a value of DWARF pointer encoding `enc` in .eh_frame_hdr's header; 0 for one this
// does not read (uleb128, aligned, indirect).
std::size_t encoded_size(std::uint8_t enc) {
  switch (enc & 0x0f) {
    case 0x02:  // udata2
    case 0x0a:  // sdata2
      return 2;
    case 0x03:  // udata4
    case 0x0b:  // sdata4
      return 4;
    case 0x00:  // absptr
    case 0x04:  // udata8
    case 0x0c:  // sdata8
      return 8;
    default:
      return 0;
  }
}

}  // namespace

unw_dyn_info_t* UnwindTables::find(pid_t pid, std::uint64_t ip, const Read& read) {
  if (auto it = by_start_.upper_bound(ip); it != by_start_.begin()) {
    --it;
    if (ip < it->second.end) return it->second.info ? &*it->second.info : nullptr;
  }
  if (!maps_) maps_ = read_maps(pid);
  auto code = std::find_if(maps_->begin(), maps_->end(),
                           [&](const Mapping& m) { return m.exec && m.contains(RuntimeAddr(ip)); });
  if (code == maps_->end()) return nullptr;
  Table& t = by_start_[code->start.value()];
  t.end = code->end.value();
  t.info = load(*code, read);
  return t.info ? &*t.info : nullptr;
}

void UnwindTables::clear() {
  maps_.reset();
  by_start_.clear();
}

// The mapping of the module's first page (file offset 0), where its ELF header is: the lowest of
// the file's mappings. The vDSO is one mapping, its own.
const Mapping* UnwindTables::base_of(const Mapping& code) const {
  if (code.path == "[vdso]") return &code;
  if (code.path.empty() || code.path[0] != '/') return nullptr;  // anonymous, JIT, [stack]
  const Mapping* base = nullptr;
  for (const Mapping& m : *maps_) {
    if (m.file_id == code.file_id && m.path == code.path && m.offset == 0 &&
        m.start <= code.start && (!base || base->start < m.start)) {
      base = &m;  // the nearest below the code, should the file be mapped twice
    }
  }
  return base;
}

std::optional<unw_dyn_info_t> UnwindTables::load(const Mapping& code, const Read& read) const {
  const Mapping* base = base_of(code);
  if (!base) return std::nullopt;
  const std::uint64_t at = base->start.value();
  Elf64_Ehdr eh{};
  if (!read(at, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum == 0 || eh.e_phnum > 64) {
    return std::nullopt;
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!read(at + eh.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr))) return std::nullopt;
  const Elf64_Phdr* hdr_ph = nullptr;
  std::optional<std::uint64_t> first_load;
  for (const auto& p : ph) {
    if (p.p_type == PT_GNU_EH_FRAME) hdr_ph = &p;
    if (p.p_type == PT_LOAD && (!first_load || p.p_vaddr < *first_load)) first_load = p.p_vaddr;
  }
  if (!hdr_ph || !first_load) return std::nullopt;
  const std::uint64_t bias = at - (*first_load & kPageMask);
  const std::uint64_t hdr = bias + hdr_ph->p_vaddr;
  // .eh_frame_hdr: version 1, eh_frame_ptr's encoding, fde_count's, the table's; eh_frame_ptr;
  // fde_count; then the table of (initial location, FDE address) pairs, both datarel sdata4.
  std::array<std::uint8_t, 4> head{};
  if (!read(hdr, head.data(), head.size()) || head[0] != 1 || head[3] != kDatarelSdata4 ||
      head[2] == kOmit || (head[2] & 0x70) != 0) {
    return std::nullopt;
  }
  std::size_t ptr_size = head[1] == kOmit ? 0 : encoded_size(head[1]);
  std::size_t count_size = encoded_size(head[2]);
  if ((head[1] != kOmit && ptr_size == 0) || count_size == 0) return std::nullopt;
  std::uint64_t count = 0;
  std::uint64_t count_at = hdr + head.size() + ptr_size;
  if (!read(count_at, &count, count_size)) return std::nullopt;  // little-endian
  if (count == 0) return std::nullopt;

  // As libunwind's own dwarf_find_unwind_table fills it (src/dwarf/Gfind_proc_info-lsb.c): the
  // table's entries are relative to the start of .eh_frame_hdr (segbase), and its length is in
  // words.
  unw_dyn_info_t di{};
  di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
  di.start_ip = code.start.value();
  di.end_ip = code.end.value();
  di.u.rti.segbase = hdr;
  di.u.rti.table_data = count_at + count_size;
  di.u.rti.table_len = count * 8 / sizeof(unw_word_t);
  return di;
}

}  // namespace probecost
