#include "tracer/jump_probes.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "breakpoint/patch_site.hpp"
#include "common/error.hpp"
#include "tracer/maps.hpp"

namespace probecost {

namespace {

// A file descriptor of ours, closed however we leave.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The header and site table of a jump area the tracee maps at `m`.
std::optional<jump::ParsedArea> read_area(TracedProcess& proc, const Mapping& m, std::string& why) {
  std::uint64_t size = m.end - m.start;
  std::vector<std::uint8_t> bytes(std::min<std::uint64_t>(size, sizeof(jump::AreaHeader)));
  proc.memory().read(m.start, bytes);
  if (bytes.size() == sizeof(jump::AreaHeader)) {
    jump::AreaHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    // Only as far as the site table goes, within the mapping (parse_area checks it all again).
    std::uint64_t table = h.sites_offset + std::uint64_t{h.site_capacity} * sizeof(jump::SiteEntry);
    if (table > bytes.size() && table <= size && h.site_capacity <= 65536) {
      bytes.resize(table);
      proc.memory().read(m.start, bytes);
    }
  }
  return jump::parse_area(bytes, m.start, why);
}

}  // namespace

std::vector<jump::ParsedArea> read_jump_areas(TracedProcess& proc,
                                              std::vector<std::string>& notes) {
  std::vector<jump::ParsedArea> out;
  for (const Mapping& m : read_maps(proc.proc_tid())) {
    // The header's mapping: the start of the memfd, read-write (the code is mapped apart).
    if (m.path.rfind(std::string("/memfd:") + jump::kAreaName, 0) != 0 || m.offset != 0 || !m.write)
      continue;
    std::string why;
    if (auto area = read_area(proc, m, why)) {
      out.push_back(*area);
    } else {
      notes.push_back("jump area at " + m.start.hex() + " not read: " + why);
    }
  }
  return out;
}

JumpProbes::JumpProbes(TracedProcess& process, const JumpOptions& options)
    : proc_(process), options_(options) {
  jump::AreaConfig config;
  config.max_sites = options.max_sites;
  if (options.events) {
    config.event_sites = options.event_sites;
    config.ring_capacity = options.ring_capacity;
  }
  layout_ = jump::AreaLayout::of(config);
}

JumpProbes::~JumpProbes() {
  // Our views only: the tracee keeps its mapping (a thread may be in a trampoline, and the
  // jumps stay valid if we are gone before removing them).
  for (Area& a : areas_) ::munmap(a.view, a.size);
}

std::optional<JumpPlan> JumpProbes::plan(RuntimeAddr site, const ProcessSymbols& symbols,
                                         std::string& why) {
  auto function = symbols.sized_function_containing(site);
  if (!function) {
    why = "no function symbol with a size covers " + site.hex() +
          ", so the code around it cannot be checked";
    return std::nullopt;
  }
  std::vector<std::uint8_t> code(function->size);
  proc_.memory().read(function->address, code);
  // Our own int3 bytes in the function would decode as int3: the plan reads the original code.
  for (const auto& s : proc_.sites()) {
    std::int64_t off = s->address() - function->address;
    if (s->enabled() && off >= 0 && off < static_cast<std::int64_t>(code.size()))
      code[static_cast<std::size_t>(off)] = s->saved_byte();
  }
  return plan_jump(function->address, code, site, why);
}

std::string JumpProbes::thread_inside(const JumpPlan& plan) {
  for (auto& [tid, t] : proc_.tasks()) {
    if (!t.stopped()) continue;  // in the kernel (vfork, exit): not in user code
    auto rip = t.rip();
    if (rip && plan.site < *rip && *rip < plan.end()) {
      return "thread " + std::to_string(tid) + " is inside the bytes to patch (at " + rip->hex() +
             ")";
    }
  }
  return "";
}

void JumpProbes::let_threads_move() {
  std::vector<pid_t> held;
  for (auto& [tid, t] : proc_.tasks()) {
    if (t.stopped() && !t.deferred && t.runs_with_us()) held.push_back(tid);
  }
  proc_.resume_stopped(held);
  // Anything they report meanwhile (a hit on an int3 probe already in) is kept for the
  // event loop; only the interrupts' own stops are taken here.
  proc_.stop_all(0);
}

std::string JumpProbes::branch_from_module(const JumpPlan& plan) {
  std::optional<Mapping> text;
  auto maps = read_maps(proc_.proc_tid());
  for (const auto& m : maps) {
    if (m.contains(plan.site)) text = m;
  }
  if (!text || text->path.empty() || text->path[0] != '/') return "";  // anonymous code: none
  // Indexed once per file for the whole run (every process that maps it: fork and exec
  // children), in file offsets, so that it holds wherever ASLR put the module.
  // The key has the file's size and mtime too: an inode number can be reused by a new file.
  static std::map<std::string, BranchIndex> by_file;
  std::ostringstream key;
  key << text->path << '@' << text->file_id;
  struct stat st {};
  if (::stat(text->path.c_str(), &st) == 0) {
    key << '@' << st.st_size << '@' << st.st_mtim.tv_sec << '.' << st.st_mtim.tv_nsec;
  }
  auto [it, fresh] = by_file.try_emplace(key.str());
  if (fresh) {
    for (const auto& m : maps) {
      if (m.path != text->path || !m.exec) continue;
      std::vector<std::uint8_t> code(static_cast<std::size_t>(m.end - m.start));
      try {
        proc_.memory().read(m.start, code);
      } catch (const Error&) {
        continue;  // unreadable (a guard page): nothing to index
      }
      it->second.add(code, RuntimeAddr(m.offset));
    }
  }
  std::int64_t bias = static_cast<std::int64_t>(text->start.value() - text->offset);
  auto file = [&](RuntimeAddr a) {
    return RuntimeAddr(a.value() - static_cast<std::uint64_t>(bias));
  };
  auto from =
      it->second.into(file(plan.site + 1), file(plan.end()), file(plan.site), file(plan.end()));
  for (auto& f : from) f = RuntimeAddr(f.value() + static_cast<std::uint64_t>(bias));
  if (from.empty()) return "";
  return "a direct branch at " + from.front().hex() + " (outside the function) lands inside the " +
         "bytes to patch";
}

bool JumpProbes::range_is_free(const JumpPlan& plan, std::string& why) {
  auto inside = [&](RuntimeAddr a) { return plan.site < a && a < plan.end(); };
  for (const auto& s : proc_.sites()) {
    if (s->enabled() && (inside(s->address()) || s->address() == plan.site)) {
      why = "an int3 probe is at " + s->address().hex() + ", inside the bytes to patch";
      return false;
    }
  }
  for (const auto& p : proc_.patches()) {
    if (p->installed() && p->address() < plan.end() &&
        plan.site < p->address() + static_cast<std::int64_t>(p->patch().length)) {
      why = "a jump probe at " + p->address().hex() + " overlaps the bytes to patch";
      return false;
    }
  }
  return true;
}

std::optional<jump::PlacedSite> JumpProbes::place(const JumpPlan& plan, std::uint32_t id,
                                                  std::size_t& area, std::string& why) {
  jump::SiteOptions opts;
  opts.id = id;
  opts.events = options_.events;
  for (area = 0; area < areas_.size(); ++area) {
    std::string no;
    if (auto placed = areas_[area].writer->add_site(plan, opts, no)) return placed;
  }
  try {
    areas_.push_back(map_area(plan.site));
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
  return areas_.back().writer->add_site(plan, opts, why);
}

std::optional<std::size_t> JumpProbes::add(RuntimeAddr site, const ProcessSymbols& symbols,
                                           std::uint32_t id, std::string label, std::string& why) {
  auto p = plan(site, symbols, why);
  if (!p) return std::nullopt;
  why = branch_from_module(*p);
  if (!why.empty()) return std::nullopt;
  // A thread caught inside the range is usually passing through: let everyone run a moment
  // and look again, a few times, before refusing (Orbit retries the same way).
  for (int attempt = 0; !(why = thread_inside(*p)).empty(); ++attempt) {
    if (attempt == 8) return std::nullopt;
    let_threads_move();
  }
  if (!range_is_free(*p, why)) return std::nullopt;
  std::size_t area = 0;
  auto placed = place(*p, id, area, why);
  if (!placed) return std::nullopt;
  proc_.add_patch(placed->patch, std::move(label)).install();
  proc_.relocated().add(placed->trampoline.block, p->site);
  for (const auto& [original, copy] : placed->trampoline.copies)
    proc_.relocated().add(copy, original);
  probes_.push_back(Probe{site, p->length, area, placed->index});
  return probes_.size() - 1;
}

std::uint64_t JumpProbes::hits(std::size_t probe) const {
  const Probe& p = probes_.at(probe);
  return areas_.at(p.area).writer->hits(p.index);
}

jump::Drained JumpProbes::drain(std::size_t probe, bool final) {
  Probe& p = probes_.at(probe);
  if (!options_.events) return {};
  auto d = jump::drain(areas_.at(p.area).writer->ring(p.index), p.cursor, final);
  p.read += d.records.size();
  p.lost += d.lost;
  return d;
}

long JumpProbes::tracee_syscall(long nr, const std::array<long, 6>& args, const char* what) {
  auto r = proc_.syscall_in_tracee(nr, args);
  if (!r)
    throw Error(std::string(what) + " in process " + std::to_string(proc_.pid()) +
                ": no thread of it is stopped where a system call can be made to run");
  if (*r < 0 && *r > -4096) {
    throw Error::from_errno(std::string(what) + " in process " + std::to_string(proc_.pid()),
                            static_cast<int>(-*r));
  }
  return *r;
}

JumpProbes::Area JumpProbes::map_area(RuntimeAddr near) {
  // The memfd is created by the tracee itself (its name on the tracee's stack, below the red
  // zone), so that its fd is the tracee's to map; pidfd_getfd(2) gives us a duplicate.
  Task* t = proc_.any_stopped_thread();
  if (!t || !t->regs()) {
    // Every thread is held in a group-stop (SIGSTOP): running a system call in one would take
    // it out of the stop. The area waits until the process runs again; int3 needs none.
    throw Error(
        "the process is stopped (SIGSTOP), so no thread can map the jump's trampoline area");
  }
  RuntimeAddr name_at((t->regs()->rsp - 512) & ~std::uint64_t{15});
  std::array<std::uint8_t, sizeof jump::kAreaName> saved{}, name{};
  std::memcpy(name.data(), jump::kAreaName, sizeof jump::kAreaName);
  proc_.memory().read(name_at, saved);
  proc_.memory().write(name_at, name);
  long tracee_fd;
  try {
    tracee_fd = tracee_syscall(SYS_memfd_create,
                               {static_cast<long>(name_at.value()), MFD_CLOEXEC, 0, 0, 0, 0},
                               "memfd_create of a jump area");
  } catch (...) {
    proc_.memory().write(name_at, saved);
    throw;
  }
  proc_.memory().write(name_at, saved);

  Fd pidfd{static_cast<int>(::syscall(SYS_pidfd_open, proc_.proc_tid(), 0))};
  Fd ours{pidfd.fd < 0 ? -1 : static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.fd, tracee_fd, 0))};
  if (ours.fd < 0) {
    int err = errno;
    tracee_syscall(SYS_close, {tracee_fd, 0, 0, 0, 0, 0}, "close");
    throw Error::from_errno(
        "pidfd_getfd of the jump area of process " + std::to_string(proc_.pid()), err);
  }
  Area a;
  a.size = layout_.size;
  if (::ftruncate(ours.fd, static_cast<off_t>(a.size)) != 0)
    throw Error::from_errno("ftruncate of a jump area");
  void* view = ::mmap(nullptr, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, ours.fd, 0);
  if (view == MAP_FAILED) throw Error::from_errno("mmap of a jump area");
  a.view = static_cast<std::uint8_t*>(view);

  // In the tracee: within +-2 GiB of the site (less the area and a margin), so that the jump
  // and the trampolines' RIP-relative operands reach.
  std::uint64_t reach = (1ull << 31) - a.size - (1ull << 20);
  auto hint = free_range_near(read_maps(proc_.proc_tid()), near, a.size, reach);
  if (!hint) {
    ::munmap(view, a.size);
    throw Error("no free address range within reach of " + near.hex() + " for a jump area");
  }
  long at = tracee_syscall(SYS_mmap,
                           {static_cast<long>(hint->value()), static_cast<long>(a.size),
                            PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, tracee_fd, 0},
                           "mmap of a jump area");
  tracee_syscall(SYS_close, {tracee_fd, 0, 0, 0, 0, 0}, "close of the jump area's fd");
  a.tracee_at = RuntimeAddr(static_cast<std::uint64_t>(at));
  // The trampolines: read and execute only, in the tracee; we write them through our view.
  tracee_syscall(SYS_mprotect,
                 {static_cast<long>(at + layout_.code_offset), static_cast<long>(layout_.code_size),
                  PROT_READ | PROT_EXEC, 0, 0, 0},
                 "mprotect of the trampolines");
  a.writer = std::make_unique<jump::AreaWriter>(std::span(a.view, a.size), a.tracee_at, layout_,
                                                ::getpid());
  return a;
}

}  // namespace probecost
