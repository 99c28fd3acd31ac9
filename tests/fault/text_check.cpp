#include "text_check.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <fstream>

#include "common/paths.hpp"

namespace fault {

namespace {

std::atomic<std::size_t> g_foreign{0};

struct ExecMapping {
  std::uint64_t start = 0, end = 0, offset = 0;
  std::string path;
};

std::vector<ExecMapping> exec_mappings(pid_t pid) {
  std::vector<ExecMapping> out;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(maps, line);) {
    ExecMapping m;
    char perms[8] = "";
    int path_at = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*u %n", &m.start,
                    &m.end, perms, &m.offset, &path_at) < 4 ||
        perms[2] != 'x' || path_at <= 0 || static_cast<std::size_t>(path_at) >= line.size()) {
      continue;
    }
    m.path = line.substr(path_at);
    if (m.path[0] != '/' || m.path.find(" (deleted)") != std::string::npos) continue;
    out.push_back(m);
  }
  return out;
}

bool read_all(int fd, std::vector<unsigned char>& buf, std::uint64_t at) {
  std::size_t done = 0;
  while (done < buf.size()) {
    ssize_t n = ::pread(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(at + done));
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// The reference process: one that maps the same libraries but that no tracer of the run under
// check has written into.
pid_t reference_for(pid_t pid) {
  return pid == ::getpid() ? ::getppid() : ::getpid();
}

// Does the reference process hold `byte` at `offset` of `path` too? Then a kernel uprobe put it
// there in every process (a tracer's int3 is in the traced process's own copy of the page).
bool also_in_reference(const std::vector<ExecMapping>& ref, int ref_mem, const std::string& path,
                       std::uint64_t offset, unsigned char byte) {
  for (const auto& r : ref) {
    if (r.path != path || offset < r.offset || offset >= r.offset + (r.end - r.start)) continue;
    unsigned char there = 0;
    return ::pread(ref_mem, &there, 1, static_cast<off_t>(r.start + (offset - r.offset))) == 1 &&
           there == byte;
  }
  return false;
}

struct Reference {
  std::vector<ExecMapping> maps;
  int mem = -1;
};

void compare(const ExecMapping& m, int mem, const Reference& ref, std::vector<std::string>& out,
             std::size_t limit) {
  int file = ::open(m.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file < 0) return;
  std::vector<unsigned char> live(m.end - m.start), disk(m.end - m.start);
  // The file may end inside the last page: compare what both have.
  ssize_t n = ::pread(file, disk.data(), disk.size(), static_cast<off_t>(m.offset));
  ::close(file);
  if (n <= 0) return;
  live.resize(static_cast<std::size_t>(n));
  disk.resize(static_cast<std::size_t>(n));
  if (!read_all(mem, live, m.start)) return;  // gone meanwhile
  for (std::size_t i = 0; i < live.size() && out.size() < limit; ++i) {
    if (live[i] == disk[i]) continue;
    if (ref.mem >= 0 && also_in_reference(ref.maps, ref.mem, m.path, m.offset + i, live[i])) {
      ++g_foreign;
      continue;
    }
    char line[256];
    std::snprintf(line, sizeof line, "%s+0x%" PRIx64 " (0x%" PRIx64 "): %02x, file %02x",
                  probecost::base_name(m.path).c_str(), m.offset + i, m.start + i, live[i],
                  disk[i]);
    out.push_back(line);
  }
}

}  // namespace

std::vector<std::string> text_differences(pid_t pid, std::size_t limit) {
  std::vector<std::string> out;
  int mem = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (mem < 0) return out;
  Reference ref;
  pid_t ref_pid = reference_for(pid);
  ref.maps = exec_mappings(ref_pid);
  ref.mem = ::open(("/proc/" + std::to_string(ref_pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  for (const auto& m : exec_mappings(pid)) compare(m, mem, ref, out, limit);
  if (ref.mem >= 0) ::close(ref.mem);
  ::close(mem);
  return out;
}

std::size_t foreign_int3s() {
  return g_foreign.load();
}

}  // namespace fault
