#include "restore/restore.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "breakpoint/in_tracee/jump_area.hpp"
#include "breakpoint/in_tracee/warm_loop.hpp"
#include "breakpoint/int3/outline.hpp"
#include "breakpoint/int3/site.hpp"
#include "breakpoint/x86/decoder.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "restore/semaphores.hpp"
#include "tracer/core/family.hpp"
#include "tracer/int3/trap_handler_state.hpp"
#include "tracer/int3/trap_records.hpp"
#include "tracer/jump/jump_probes.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/seccomp.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

namespace {

// The mapped file's bytes for [m.start, m.end), from /proc/PID/map_files (the very file that
// is mapped, even if it was replaced or deleted on disk since), or else from its path.
std::vector<std::uint8_t> file_bytes(pid_t pid, const Mapping& m) {
  Fd fd(open_mapped_file(pid, m));
  if (!fd) return {};
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(m.end - m.start));
  ssize_t n = ::pread(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(m.offset));
  bytes.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return bytes;
}

std::string symbol_offset(const Symbol& sym, RuntimeAddr at) {
  char off[32];
  std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(at - sym.address));
  return sym.name + off;
}

// Reports every int3 in `m` that its file does not have and no record of ours covers: someone
// else's breakpoint (the program's own, a debugger's, a kernel uprobe's), left alone.
void foreign_int3s(TracedProcess& proc, const ProcessSymbols& symbols, const Mapping& m,
                   const std::vector<trap::ParsedArea>& areas, RestoreReport& report) {
  auto file = file_bytes(proc.proc_tid(), m);
  if (file.empty()) return;
  std::vector<std::uint8_t> memory(file.size());
  proc.memory().read(m.start, memory);
  ++report.mappings_compared;
  for (std::size_t i = 0; i < file.size(); ++i) {
    if (memory[i] != kInt3 || file[i] == kInt3) continue;
    RuntimeAddr at = m.start + static_cast<std::int64_t>(i);
    if (record_of(areas, at)) continue;
    RestoredByte b;
    b.address = at;
    b.module = m.path;
    b.original = file[i];
    if (auto sym = symbols.containing(at)) b.where = symbol_offset(*sym, at);
    b.why_not =
        "probecost has no record of writing it: the program's own, a debugger's or a kernel "
        "uprobe's breakpoint";
    report.bytes.push_back(b);
  }
}

// Why the int3 of `r` must stay, or nothing when it is exactly what probecost wrote, where it
// wrote it.
std::optional<std::string> why_not_restore(TracedProcess& proc, const std::vector<Mapping>& maps,
                                           const trap::SiteRecord& r) {
  auto m =
      std::find_if(maps.begin(), maps.end(), [&](const Mapping& m) { return m.contains(r.site); });
  if (m == maps.end()) return "nothing is mapped there any more";
  if (file_identity(*m, r.site) != r.file)
    return "the mapping there is not the one probecost wrote into (now " +
           (m->path.empty() ? std::string("anonymous memory") : m->path) + ")";
  std::uint8_t now = proc.memory().read_byte(r.site);
  if (now != r.patched) {
    char what[96];
    std::snprintf(what, sizeof what,
                  "it holds 0x%02x, neither probecost's int3 nor the original 0x%02x", now,
                  r.original);
    return std::string(what);
  }
  return std::nullopt;
}

// Whether the int3 of `r` is gone already: its original byte back (a guardian's doing, or a
// thread that was single-stepping it when probecost died), in the mapping it was written into.
bool already_back(TracedProcess& proc, const std::vector<Mapping>& maps,
                  const trap::SiteRecord& r) {
  auto m =
      std::find_if(maps.begin(), maps.end(), [&](const Mapping& m) { return m.contains(r.site); });
  return m != maps.end() && file_identity(*m, r.site) == r.file &&
         proc.memory().read_byte(r.site) == r.original;
}

void mark_removed(TracedProcess& proc, const trap::ParsedArea& area, const trap::SiteRecord& r) {
  proc.memory().write_byte(trap::state_byte(area, r), trap::kRemoved);
}

void restore_int3s(TracedProcess& proc, const ProcessSymbols& symbols,
                   const std::vector<Mapping>& maps, const std::vector<trap::ParsedArea>& areas,
                   bool dry_run, RestoreReport& report) {
  std::size_t back = 0;
  for (const auto& area : areas) {
    for (const auto& r : area.records) {
      if (!r.installed) continue;
      if (already_back(proc, maps, r)) {
        ++back;
        if (!dry_run) mark_removed(proc, area, r);
        continue;
      }
      RestoredByte b;
      b.address = r.site;
      b.ours = true;
      b.original = r.original;
      auto m = std::find_if(maps.begin(), maps.end(),
                            [&](const Mapping& m) { return m.contains(r.site); });
      if (m != maps.end()) b.module = m->path;
      b.where = symbols.describe(r.site);
      b.why_not = why_not_restore(proc, maps, r).value_or("");
      if (b.why_not.empty() && !dry_run) {
        // The site owns the byte from now on; detach() puts it back, after rewinding a thread
        // stopped one past it with its int3's SIGTRAP still queued.
        proc.space().sites().add(b.address, b.where).adopt(b.original);
        mark_removed(proc, area, r);
        b.restored = true;
      }
      report.bytes.push_back(b);
    }
  }
  if (back)
    report.notes.push_back(std::to_string(back) +
                           " int3 byte(s) probecost recorded hold their original byte again (its "
                           "guardian put them back): nothing to do there");
}

const char* state_name(PatchState s) {
  switch (s) {
    case PatchState::Patched:
      return "patched";
    case PatchState::Transition:
      return "half-patched";
    case PatchState::Original:
      return "original";
    case PatchState::Foreign:
      return "changed since (left alone)";
  }
  return "?";
}

// True when no site of `area` jumps into it any more (each put back, or original already).
bool restore_jumps(TracedProcess& proc, const ProcessSymbols& symbols, const jump::ParsedArea& area,
                   bool dry_run, RestoreReport& report) {
  bool out = true;
  for (const auto& site : area.sites) {
    RestoredJump j;
    j.address = site.patch.site;
    j.where = symbols.describe(j.address);
    j.length = site.patch.length;
    j.hits = site.hits;
    j.tracer_pid = area.tracer_pid;
    std::vector<std::uint8_t> now(site.patch.length);
    proc.memory().read(j.address, now);
    PatchState state = patch_state(site.patch, now);
    j.state = state_name(state);
    // Every thread is stopped, and none can be inside a patched range: bytes in any order.
    if (!dry_run && (state == PatchState::Patched || state == PatchState::Transition)) {
      j.restored = restore(proc.memory(), site.patch) != PatchState::Foreign;
    }
    out &= state == PatchState::Original || j.restored;
    report.jumps.push_back(j);
  }
  return out;
}

std::uint64_t inode_of(const Mapping& m) {
  auto colon = m.file_id.rfind(':');
  return colon == std::string::npos ? 0 : std::stoull(m.file_id.substr(colon + 1));
}

// The memfd mapping that starts at `at` and the ones of the same memfd right after it: its
// extent, from /proc/PID/maps (never from a size the process's memory claims).
std::optional<OurMapping> extent_at(const std::vector<Mapping>& maps, RuntimeAddr at,
                                    OurMapping::Kind kind) {
  auto m = std::find_if(maps.begin(), maps.end(), [at](const Mapping& m) { return m.start == at; });
  if (m == maps.end()) return std::nullopt;
  OurMapping o{kind, at, 0, inode_of(*m)};
  RuntimeAddr end = m->start;
  for (auto x = m;
       x != maps.end() && x->start == end && x->path == m->path && inode_of(*x) == o.inode; ++x)
    end = x->end;
  o.size = static_cast<std::uint64_t>(end - at);
  return o;
}

// The call buffers a killed probecost left: mappings of a memfd by our name, whose header is
// ours and says they are mapped where they are.
std::vector<OurMapping> left_call_buffers(TracedProcess& proc, const std::vector<Mapping>& maps) {
  std::vector<OurMapping> out;
  const std::string name = std::string("/memfd:") + jump::kCallBufferName;
  for (const Mapping& m : maps) {
    if (m.path.rfind(name, 0) != 0 || m.offset != 0 || !m.write) continue;
    jump::BufferHeader h{};
    try {
      proc.memory().read(m.start, {reinterpret_cast<std::uint8_t*>(&h), sizeof h});
    } catch (const Error&) {
      continue;
    }
    if (std::memcmp(h.magic, jump::kCallBufferMagic, sizeof h.magic) != 0 ||
        h.tracee_address != m.start.value())
      continue;
    if (auto o = extent_at(maps, m.start, OurMapping::Kind::CallBuffer)) out.push_back(*o);
  }
  return out;
}

// The one-page code mappings a killed probecost left: the step-over's scratch pages and the
// warm loop's page (anonymous, executable, and their first slot a header that says so).
std::vector<OurMapping> left_pages(TracedProcess& proc, const std::vector<Mapping>& maps) {
  std::vector<OurMapping> out;
  for (const Mapping& m : maps) {
    if (!m.exec || !m.path.empty() || inode_of(m) != 0 || m.end - m.start != kPageSize) continue;
    ScratchHeader h{};
    try {
      proc.memory().read(m.start, {reinterpret_cast<std::uint8_t*>(&h), sizeof h});
    } catch (const Error&) {
      continue;
    }
    if (h.area_address != m.start.value() || h.area_size != kPageSize || h.tracer_pid <= 0)
      continue;
    if (std::memcmp(h.magic, kScratchMagic, sizeof h.magic) == 0)
      out.push_back({OurMapping::Kind::ScratchPage, m.start, kPageSize, 0, h.tracer_pid});
    if (std::memcmp(h.magic, warm::kMagic, sizeof h.magic) == 0)
      out.push_back({OurMapping::Kind::WarmPage, m.start, kPageSize, 0, h.tracer_pid});
  }
  return out;
}

// What a killed probecost left mapped that nothing jumps into any more, handed to the detach
// (OurMappings::release: only what no thread is in goes); the call buffers only when every
// jump area goes with them (any trampoline may write into them).
void reclaim(TracedProcess& proc, OurMappings& into, const std::vector<Mapping>& maps,
             const std::vector<std::pair<RuntimeAddr, bool>>& areas, bool dry_run,
             RestoreReport& report) {
  // An area whose header could not be read may still have jumps into it, and write records.
  const std::string area_name = std::string("/memfd:") + jump::kAreaName;
  std::size_t headers =
      static_cast<std::size_t>(std::count_if(maps.begin(), maps.end(), [&](const Mapping& m) {
        return m.path.rfind(area_name, 0) == 0 && m.offset == 0 && m.write;
      }));
  bool every_area = headers == areas.size();
  std::vector<OurMapping> found;
  for (const auto& [at, done] : areas) {
    every_area &= done;
    auto o = extent_at(maps, at, OurMapping::Kind::JumpArea);
    if (done && o) found.push_back(*o);
  }
  auto buffers = left_call_buffers(proc, maps);
  if (every_area) found.insert(found.end(), buffers.begin(), buffers.end());
  auto pages = left_pages(proc, maps);
  found.insert(found.end(), pages.begin(), pages.end());
  for (const OurMapping& o : found) {
    if (dry_run) {
      report.notes.push_back("would unmap the " + o.describe() + " if no thread is in it");
    } else {
      into.add(o);
    }
  }
}

// Whether `site` holds probecost's bytes still: a jump an area lists (whole, or half-written),
// or an int3 a trap area records.
bool holds_probe(TracedProcess& proc, const std::vector<jump::ParsedArea>& jumps,
                 const std::vector<trap::ParsedArea>& areas, RuntimeAddr site) {
  try {
    for (const auto& area : jumps) {
      for (const auto& s : area.sites) {
        if (s.patch.site != site) continue;
        std::vector<std::uint8_t> now(s.patch.length);
        proc.memory().read(site, now);
        PatchState state = patch_state(s.patch, now);
        if (state == PatchState::Patched || state == PatchState::Transition) return true;
      }
    }
    return record_of(areas, site) && proc.memory().read_byte(site) == kInt3;
  } catch (const Error&) {
    return false;
  }
}

// True when every site of `area` holds its original bytes: nothing jumps into it.
bool all_out(TracedProcess& proc, const jump::ParsedArea& area) {
  return std::all_of(area.sites.begin(), area.sites.end(), [&](const auto& site) {
    std::vector<std::uint8_t> now(site.patch.length);
    proc.memory().read(site.patch.site, now);
    return patch_state(site.patch, now) == PatchState::Original;
  });
}

// The SIGTRAP handler of `area`: the program's own disposition back if ours is still the
// process's; left alone if the program has set another since.
void restore_handler(TracedProcess& proc, const trap::ParsedArea& area, bool dry_run,
                     RestoreReport& report) {
  if (area.state != trap::HandlerState::Installed) return;
  std::string who = "the SIGTRAP handler probecost (process " + std::to_string(area.tracer_pid) +
                    ") installed at " + area.handler.hex();
  std::optional<trap::KernelSigaction> now;
  try {
    now = sigtrap_disposition(proc);
  } catch (const seccomp::Refused& e) {
    report.handlers.push_back(who + ": left alone, " + e.what());
    return;
  }
  if (!now) {
    report.handlers.push_back(who + ": left alone, its disposition could not be read now");
    return;
  }
  if (now->handler != area.handler.value()) {
    report.handlers.push_back(who + ": left alone, the program has set its own since");
    return;
  }
  if (dry_run) {
    report.handlers.push_back(who + ": would be taken out, the program's own put back");
    return;
  }
  bool ok = false;
  try {
    ok = put_back_disposition(proc, area.address);
  } catch (const seccomp::Refused& e) {
    report.handlers.push_back(who + ": left alone, " + e.what());
    return;
  }
  report.handlers.push_back(who + (ok ? ": taken out, the program's own disposition put back"
                                      : ": could not be taken out now"));
}

}  // namespace

RestoreReport restore_process(pid_t pid, bool dry_run) {
  RestoreReport report;
  report.pid = pid;
  auto family = Family::attach(pid);
  TracedProcess& proc = family->root();
  for (const auto& n : proc.found_at_attach()) report.notes.push_back(n);
  ProcessSymbols symbols(proc.proc_tid());
  auto maps = read_maps(proc.proc_tid());
  auto parsed_jumps = read_jump_areas(proc, report.notes);
  auto areas = read_trap_areas(proc.memory(), maps, report.notes);
  // The semaphores before the probes come out: a raise is lowered only while its probe's site
  // still holds what probecost wrote.
  restore_semaphores(
      proc.memory(), maps, read_semaphore_tables(proc.memory(), maps, report.notes),
      [&](RuntimeAddr site) { return holds_probe(proc, parsed_jumps, areas, site); }, dry_run,
      report, proc.space().our_mappings());
  // Jumps first: their original bytes may hold what looks like an int3 to the file comparison.
  std::vector<std::pair<RuntimeAddr, bool>> jump_areas;
  for (const auto& area : parsed_jumps)
    jump_areas.emplace_back(area.address, restore_jumps(proc, symbols, area, dry_run, report));
  reclaim(proc, proc.space().our_mappings(), maps, jump_areas, dry_run, report);
  restore_int3s(proc, symbols, maps, areas, dry_run, report);
  for (const auto& area : areas) restore_handler(proc, area, dry_run, report);
  for (const Mapping& m : maps) {
    if (m.exec && !m.path.empty() && m.path[0] == '/' && m.path.rfind("/memfd:", 0) != 0)
      foreign_int3s(proc, symbols, m, areas, report);
  }
  // A jump's padding is int3 too, and is the jump's (restored, or left with it).
  std::erase_if(report.bytes, [&](const RestoredByte& b) {
    return !b.ours &&
           std::any_of(report.jumps.begin(), report.jumps.end(), [&](const RestoredJump& j) {
             return j.address <= b.address &&
                    b.address < j.address + static_cast<std::int64_t>(j.length);
           });
  });
  proc.detach();
  report.unmapped_bytes = proc.space().our_mappings().unmapped_bytes();
  if (std::uint64_t bytes = report.unmapped_bytes) {
    report.notes.push_back(
        "unmapped " + std::to_string(bytes >> 10) +
        " KiB of jump areas, call buffers and semaphore tables left by probecost");
  }
  for (const auto& n : proc.space().our_mappings().notes()) report.notes.push_back(n);
  return report;
}

Reclaimed reclaim_left_areas(TracedProcess& proc) {
  Reclaimed out;
  std::vector<std::pair<RuntimeAddr, bool>> areas;
  for (const auto& area : read_jump_areas(proc, out.notes))
    areas.emplace_back(area.address, all_out(proc, area));
  // A release of their own, apart from this probecost's mappings (its detach's to release).
  OurMappings left;
  RestoreReport report;
  reclaim(proc, left, proc.maps(), areas, false, report);
  left.release(proc);
  out.unmapped_bytes = left.unmapped_bytes();
  for (const auto& n : left.notes()) out.notes.push_back(n);
  return out;
}

}  // namespace probecost
