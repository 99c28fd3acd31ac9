#include "tracer/restore.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "breakpoint/decoder.hpp"
#include "breakpoint/jump_area.hpp"
#include "breakpoint/site.hpp"
#include "common/error.hpp"
#include "tracer/family.hpp"
#include "tracer/jump_probes.hpp"
#include "tracer/maps.hpp"
#include "tracer/symbols.hpp"

namespace probecost {

namespace {

// The mapped file's bytes for [m.start, m.end), from /proc/PID/map_files (the very file that
// is mapped, even if it was replaced or deleted on disk since), or else from its path.
std::vector<std::uint8_t> file_bytes(pid_t pid, const Mapping& m) {
  int fd = open_mapped_file(pid, m);
  if (fd < 0) return {};
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(m.end - m.start));
  ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(m.offset));
  ::close(fd);
  bytes.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return bytes;
}

// Whether `at` starts an instruction of `sym`, decoding the file's bytes from its start (the
// memory may hold other int3 bytes on the way).
bool at_boundary(const Symbol& sym, RuntimeAddr at, const Mapping& m,
                 const std::vector<std::uint8_t>& file) {
  if (sym.address < m.start) return false;
  std::size_t off = static_cast<std::size_t>(sym.address - m.start);
  RuntimeAddr pos = sym.address;
  while (pos < at && off < file.size()) {
    auto in = decode(std::span(file).subspan(off), pos);
    if (!in) return false;
    pos = in->next();
    off += in->length;
  }
  return pos == at;
}

std::string symbol_offset(const Symbol& sym, RuntimeAddr at) {
  char off[32];
  std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(at - sym.address));
  return sym.name + off;
}

void compare_mapping(TracedProcess& proc, const ProcessSymbols& symbols, const Mapping& m,
                     RestoreReport& report) {
  auto file = file_bytes(proc.proc_tid(), m);
  if (file.empty()) return;
  std::vector<std::uint8_t> memory(file.size());
  proc.memory().read(m.start, memory);
  ++report.mappings_compared;
  for (std::size_t i = 0; i < file.size(); ++i) {
    if (memory[i] != kInt3 || file[i] == kInt3) continue;
    RestoredByte b;
    b.address = m.start + static_cast<std::int64_t>(i);
    b.module = m.path;
    b.original = file[i];
    auto sym = symbols.containing(b.address);
    if (!sym) {
      b.why_not = "no function symbol covers it";
    } else {
      b.where = symbol_offset(*sym, b.address);
      if (!at_boundary(*sym, b.address, m, file)) b.why_not = "not at an instruction boundary";
    }
    report.bytes.push_back(b);
  }
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

void restore_jumps(TracedProcess& proc, const ProcessSymbols& symbols, const jump::ParsedArea& area,
                   bool dry_run, RestoreReport& report) {
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
    report.jumps.push_back(j);
  }
}

}  // namespace

RestoreReport restore_process(pid_t pid, bool dry_run) {
  RestoreReport report;
  report.pid = pid;
  auto family = Family::attach(pid);
  TracedProcess& proc = family->root();
  ProcessSymbols symbols(proc.proc_tid());
  auto maps = read_maps(proc.proc_tid());
  // Jumps first: their original bytes may hold what looks like an int3 to the file comparison.
  for (const auto& area : read_jump_areas(proc, report.notes))
    restore_jumps(proc, symbols, area, dry_run, report);
  for (const Mapping& m : maps) {
    if (m.exec && !m.path.empty() && m.path[0] == '/' && m.path.rfind("/memfd:", 0) != 0)
      compare_mapping(proc, symbols, m, report);
  }
  // A jump's padding is int3 too, and is the jump's (restored, or left with it).
  std::erase_if(report.bytes, [&](const RestoredByte& b) {
    return std::any_of(report.jumps.begin(), report.jumps.end(), [&](const RestoredJump& j) {
      return j.address <= b.address && b.address < j.address + static_cast<std::int64_t>(j.length);
    });
  });
  for (RestoredByte& b : report.bytes) {
    if (!b.why_not.empty() || dry_run) continue;
    // The site owns the byte from now on; detach() puts it back, after rewinding a thread
    // stopped one past it with its int3's SIGTRAP still queued.
    proc.sites().add(b.address, b.where).adopt(b.original);
    b.restored = true;
  }
  proc.detach();
  return report;
}

}  // namespace probecost
