#include "restore/semaphores.hpp"

#include <algorithm>
#include <cstring>

#include "breakpoint/x86/tracee_memory.hpp"
#include "common/error.hpp"
#include "tracer/int3/trap_records.hpp"

namespace probecost {

namespace {

// Mappings larger than this are the program's, not two or more tables side by side: only their
// first page is looked at.
constexpr std::int64_t kScanLimit = 64 * sema::kTableSize;

bool has_magic(TraceeMemory& memory, RuntimeAddr at) {
  char magic[sizeof sema::kMagic];
  try {
    memory.read(at, {reinterpret_cast<std::uint8_t*>(magic), sizeof magic});
  } catch (const Error&) {
    return false;
  }
  return std::memcmp(magic, sema::kMagic, sizeof magic) == 0;
}

std::uint16_t value_at(TraceeMemory& memory, RuntimeAddr at) {
  std::uint16_t v = 0;
  memory.read(at, {reinterpret_cast<std::uint8_t*>(&v), sizeof v});
  return v;
}

// Why the raise `r` must not be lowered now, or nothing when it may.
std::string why_not_lower(TraceeMemory& memory, const std::vector<Mapping>& maps,
                          const sema::Raise& r, const HoldsProbe& holds, std::uint16_t& value) {
  auto m = std::find_if(maps.begin(), maps.end(), [&](const Mapping& m) {
    return m.contains(r.address) && m.contains(r.address + 1);
  });
  if (m == maps.end()) return "nothing is mapped there any more";
  if (r.file == trap::FileIdentity{} || file_identity(*m, r.address) != r.file)
    return "the mapping there is not the file's data it was raised in";
  if (!holds(r.witness))
    return "its probe's site (" + r.witness.hex() +
           ") no longer holds probecost's bytes: the count may not be probecost's any more";
  value = value_at(memory, r.address);
  if (value == 0) return "it is 0 already (the program or another tracer lowered it)";
  return "";
}

}  // namespace

std::vector<sema::ParsedTable> read_semaphore_tables(TraceeMemory& memory,
                                                     const std::vector<Mapping>& maps,
                                                     std::vector<std::string>& notes) {
  std::vector<sema::ParsedTable> out;
  for (const Mapping& m : maps) {
    if (!m.path.empty() || !m.read || m.write || m.exec) continue;
    std::int64_t scan = std::min(m.end - m.start, kScanLimit);
    for (std::int64_t off = 0; off + static_cast<std::int64_t>(sema::kTableSize) <= scan;
         off += static_cast<std::int64_t>(sema::kTableSize)) {
      RuntimeAddr at = m.start + off;
      if (!has_magic(memory, at)) continue;
      std::vector<std::uint8_t> bytes(sema::kTableSize);
      std::string why;
      try {
        memory.read(at, bytes);
      } catch (const Error& e) {
        why = e.what();
      }
      auto t = why.empty() ? sema::parse_table(bytes, at, why) : std::nullopt;
      if (t) {
        out.push_back(std::move(*t));
      } else {
        notes.push_back("USDT semaphore table at " + at.hex() + " not read: " + why);
      }
    }
  }
  return out;
}

void restore_semaphores(TraceeMemory& memory, const std::vector<Mapping>& maps,
                        const std::vector<sema::ParsedTable>& tables, const HoldsProbe& holds,
                        bool dry_run, RestoreReport& report, OurMappings& into) {
  for (const auto& t : tables) {
    for (const auto& r : t.records) {
      if (r.state != sema::kRaised) continue;  // lowered, or its library went
      RestoredSemaphore s;
      s.address = r.address;
      s.tracer_pid = t.tracer_pid;
      auto m = std::find_if(maps.begin(), maps.end(),
                            [&](const Mapping& m) { return m.contains(r.address); });
      if (m != maps.end()) s.module = m->path;
      s.why_not = why_not_lower(memory, maps, r, holds, s.before);
      s.after = s.before;
      if (s.why_not.empty() && !dry_run) {
        // Marked first: a death of this restore between the two never lowers it twice. Every
        // thread is stopped: the program never reads a half-written value.
        memory.write_byte(r.state_at, sema::kLowered);
        s.after = static_cast<std::uint16_t>(s.before - 1);
        memory.write(r.address, {reinterpret_cast<const std::uint8_t*>(&s.after), sizeof s.after});
        s.lowered = true;
      }
      report.semaphores.push_back(s);
    }
    // Each raise is lowered or reported with why not (a later restore could only say the same):
    // the table goes.
    if (!dry_run) into.add({OurMapping::Kind::SemaphoreTable, t.address, t.size, 0, t.tracer_pid});
  }
}

}  // namespace probecost
