#include "tracer/restore.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "breakpoint/decoder.hpp"
#include "breakpoint/error.hpp"
#include "breakpoint/site.hpp"
#include "tracer/maps.hpp"
#include "tracer/process.hpp"
#include "tracer/symbols.hpp"

namespace probecost {

namespace {

// The mapped file's bytes for [m.start, m.end), from /proc/PID/map_files (the very file that
// is mapped, even if it was replaced or deleted on disk since), or else from its path.
std::vector<std::uint8_t> file_bytes(pid_t pid, const Mapping& m) {
  char range[64];
  std::snprintf(range, sizeof range, "%llx-%llx", static_cast<unsigned long long>(m.start.value()),
                static_cast<unsigned long long>(m.end.value()));
  int fd = ::open(("/proc/" + std::to_string(pid) + "/map_files/" + range).c_str(),
                  O_RDONLY | O_CLOEXEC);
  if (fd < 0) fd = ::open(m.path.c_str(), O_RDONLY | O_CLOEXEC);
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

}  // namespace

RestoreReport restore_process(pid_t pid, bool dry_run) {
  RestoreReport report;
  report.pid = pid;
  auto proc = TracedProcess::attach(pid);
  ProcessSymbols symbols(proc->proc_tid());
  for (const Mapping& m : read_maps(proc->proc_tid())) {
    if (m.exec && !m.path.empty() && m.path[0] == '/') compare_mapping(*proc, symbols, m, report);
  }
  for (RestoredByte& b : report.bytes) {
    if (!b.why_not.empty() || dry_run) continue;
    // The site owns the byte from now on; detach() puts it back, after rewinding a thread
    // stopped one past it with its int3's SIGTRAP still queued.
    proc->sites().add(b.address, b.where).adopt(b.original);
    b.restored = true;
  }
  proc->detach();
  return report;
}

}  // namespace probecost
