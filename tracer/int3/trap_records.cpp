#include "tracer/int3/trap_records.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "breakpoint/x86/tracee_memory.hpp"
#include "common/error.hpp"

namespace probecost {

namespace {

// An area's header and records, read as far as its header says they go within the mapping.
std::optional<trap::ParsedArea> read_area(TraceeMemory& memory, const Mapping& m,
                                          std::string& why) {
  std::uint64_t size = m.end - m.start;
  std::vector<std::uint8_t> bytes(sizeof(trap::TrapHeader));
  memory.read(m.start, bytes);
  trap::TrapHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  std::uint64_t table = h.records_offset + std::uint64_t{h.record_count} * sizeof(trap::TrapRecord);
  if (table > bytes.size() && table <= size) {
    bytes.resize(table);
    memory.read(m.start, bytes);
  }
  return trap::parse_area(bytes, m.start, why);
}

bool has_magic(TraceeMemory& memory, const Mapping& m) {
  char magic[sizeof trap::kMagic];
  try {
    memory.read(m.start, {reinterpret_cast<std::uint8_t*>(magic), sizeof magic});
  } catch (const Error&) {
    return false;  // a guard page, or a mapping gone meanwhile
  }
  return std::memcmp(magic, trap::kMagic, sizeof magic) == 0;
}

}  // namespace

std::vector<trap::ParsedArea> read_trap_areas(TraceeMemory& memory,
                                              const std::vector<Mapping>& maps,
                                              std::vector<std::string>& notes) {
  std::vector<trap::ParsedArea> out;
  for (const Mapping& m : maps) {
    if (!m.path.empty() || !m.read || m.end - m.start < static_cast<std::int64_t>(trap::kPage))
      continue;
    if (!has_magic(memory, m)) continue;
    std::string why;
    if (auto area = read_area(memory, m, why)) {
      out.push_back(std::move(*area));
    } else {
      notes.push_back("trap area at " + m.start.hex() + " not read: " + why);
    }
  }
  return out;
}

std::string whose_int3(TraceeMemory& memory, const std::vector<Mapping>& maps, RuntimeAddr at,
                       pid_t pid) {
  std::vector<std::string> notes;
  auto areas = read_trap_areas(memory, maps, notes);
  for (const auto& area : areas) {
    for (const auto& r : area.records) {
      if (r.installed && r.site == at)
        return "it holds an int3 that probecost (process " + std::to_string(area.tracer_pid) +
               ") wrote and left there when it was killed; 'probecost restore -p " +
               std::to_string(pid) + "' puts the byte back";
    }
  }
  return "it holds someone else's breakpoint, an int3 that probecost did not write (the "
         "program's own, a debugger's, or a kernel uprobe's: bpftrace, perf probe); probecost "
         "leaves it alone";
}

const trap::SiteRecord* record_of(const std::vector<trap::ParsedArea>& areas, RuntimeAddr site) {
  for (const auto& area : areas) {
    for (const auto& r : area.records) {
      if (r.installed && r.site == site) return &r;
    }
  }
  return nullptr;
}

}  // namespace probecost
