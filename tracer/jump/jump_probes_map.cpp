// The jump areas' memfd: made by the tracee, mapped by it near the sites and by us, and found
// again by its header (probecost restore).
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "breakpoint/in_tracee/warm_loop.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "tracer/jump/jump_probes.hpp"
#include "tracer/os/fault_plan.hpp"

namespace probecost {

namespace {

// The header and site table of a jump area the tracee maps at `m` (its first mapping: header
// and sites), and the per-CPU counters when it has them (a mapping of their own, further on).
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
      std::uint64_t counters = std::uint64_t{h.site_capacity} * h.cpus * 64;
      if (h.cpus && h.cpus <= 65536 && h.counters_offset >= table && counters <= (64u << 20) &&
          h.counters_offset + counters <= h.area_size) {
        bytes.resize(h.counters_offset + counters);
        try {
          proc.memory().read(m.start + static_cast<std::int64_t>(h.counters_offset),
                             std::span(bytes).subspan(h.counters_offset));
        } catch (const Error&) {
          bytes.resize(table);  // not mapped there: the hits are the hit counters' alone
        }
      }
    }
  }
  return jump::parse_area(bytes, m.start, why);
}

bool refused(long r) {
  return r == -EPERM || r == -EACCES;
}

}  // namespace

std::vector<jump::ParsedArea> read_jump_areas(TracedProcess& proc,
                                              std::vector<std::string>& notes) {
  std::vector<jump::ParsedArea> out;
  for (const Mapping& m : proc.maps()) {
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

// The raw result (-errno on failure); Error when no thread can run it.
long JumpProbes::tracee_syscall(long nr, const std::array<long, 6>& args, const char* what) {
  auto r = proc_.calls().syscall(nr, args);
  if (!r)
    throw Error(std::string(what) + " in process " + std::to_string(proc_.pid()) +
                ": no thread of it is stopped where a system call can be made to run");
  return *r;
}

void JumpProbes::lent_once(const char* what, const std::function<void()>& body) {
  Task* t = proc_.calls().any_stopped_thread();
  if (!t || !t->regs()) {
    // Every thread is held in a group-stop (SIGSTOP): running a system call in one would take
    // it out of the stop. The area waits until the process runs again; int3 needs none.
    throw Error(std::string("the process is stopped (SIGSTOP), so no thread can map ") + what);
  }
  if (!proc_.in_one_lending(body))
    throw Error(std::string(what) + " in process " + std::to_string(proc_.pid()) +
                ": no thread of it is stopped where a system call can be made to run");
}

namespace {

// What map_area has made so far, undone unless it completes: a refused jump leaves no mapping
// and no file descriptor in the process.
struct Undo {
  std::function<long(long, const std::array<long, 6>&, const char*)> syscall;
  long tracee_fd = -1;
  long tracee_at = 0;
  std::size_t size = 0;
  void* view = nullptr;
  Fd ours = Fd(-1);         // our descriptor of the memfd
  std::uint64_t inode = 0;  // the memfd's
  ~Undo() {
    try {
      if (tracee_at)
        syscall(SYS_munmap, {tracee_at, static_cast<long>(size), 0, 0, 0, 0}, "munmap");
      if (tracee_fd >= 0) syscall(SYS_close, {tracee_fd, 0, 0, 0, 0, 0}, "close");
    } catch (...) {
      // The process is gone or cannot run a system call now: nothing more to undo here.
    }
    if (view) ::munmap(view, size);
  }
};

Error failed(const std::string& what, pid_t pid, long r) {
  return Error::from_errno(what + " in process " + std::to_string(pid), static_cast<int>(-r));
}

// A memfd the tracee makes (its fd in undo.tracee_fd), `undo.size` bytes, mapped here too
// (undo.view). It is made by the tracee itself (its name on the stack of the thread that makes
// it, below the red zone), so that its fd is the tracee's to map; pidfd_getfd(2) gives us a
// duplicate. Inside a lending (JumpProbes::lent_once), where call_thread names the lent thread.
void shared_memfd(TracedProcess& proc, Undo& undo, const std::string& name, const char* what) {
  auto t = proc.call_thread();
  if (!t) throw Error(std::string("no thread of the process can map ") + what + " now");
  RuntimeAddr name_at((t->rsp - 512) & ~std::uint64_t{15});
  std::vector<std::uint8_t> saved(name.size() + 1), bytes(name.begin(), name.end());
  bytes.push_back(0);
  proc.memory().read(name_at, saved);
  proc.memory().write(name_at, bytes);
  long fd = 0;
  try {
    fd =
        undo.syscall(SYS_memfd_create,
                     {static_cast<long>(name_at.value()), MFD_CLOEXEC, 0, 0, 0, 0}, "memfd_create");
  } catch (...) {
    proc.memory().write(name_at, saved);
    throw;
  }
  proc.memory().write(name_at, saved);
  if (fd < 0) throw failed(std::string("memfd_create of ") + what, proc.pid(), fd);
  undo.tracee_fd = fd;

  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, proc.proc_tid(), 0)));
  Fd ours(!pidfd ? -1 : static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), fd, 0)));
  if (!ours) throw failed(std::string("pidfd_getfd of ") + what, proc.pid(), -errno);
  struct stat st {};
  if (::fstat(ours.get(), &st) == 0) undo.inode = st.st_ino;
  if (::ftruncate(ours.get(), static_cast<off_t>(undo.size)) != 0)
    throw Error::from_errno(std::string("ftruncate of ") + what);
  void* view = ::mmap(nullptr, undo.size, PROT_READ | PROT_WRITE, MAP_SHARED, ours.get(), 0);
  if (view == MAP_FAILED) throw Error::from_errno(std::string("mmap of ") + what);
  undo.view = view;
  undo.ours = std::move(ours);
}

// Every page of our view allocated, as MAP_POPULATE would have made them (MADV_POPULATE_WRITE,
// Linux 5.14; else each page's first byte written onto itself: nothing else writes yet).
void populate(std::uint8_t* view, std::uint64_t size) {
  if (::madvise(view, size, MADV_POPULATE_WRITE) == 0) return;
  for (std::uint64_t at = 0; at < size; at += 4096) {
    volatile std::uint8_t* p = view + at;
    *p = *p;
  }
}

// The tracee's page table entries for [at, at + size) of a shared mapping whose pages exist:
// a read of one byte per page through process_vm_readv faults each in, writable (a shared
// writable shmem mapping needs no write notification), as MAP_POPULATE would have.
void fault_in(pid_t pid, RuntimeAddr at, std::uint64_t size) {
  constexpr std::size_t kBatch = 1024;  // IOV_MAX
  std::vector<iovec> remote;
  std::vector<char> sink(kBatch);
  iovec local{sink.data(), sink.size()};
  constexpr std::uint64_t kPage = 4096;
  for (std::uint64_t off = 0; off < size; off += kPage) {
    remote.push_back({reinterpret_cast<void*>(at.value() + off), 1});
    if (remote.size() == kBatch || off + kPage >= size) {
      local.iov_len = remote.size();
      fault_plan::before_call();  // a system call on the tracee, as ProcMemory's are
      ::process_vm_readv(pid, &local, 1, remote.data(), remote.size(), 0);
      remote.clear();
    }
  }
}

// Every page of our view read once by the kernel through it (a byte of each written back onto
// itself by pwrite(2) from the view, while nothing else writes but warm_in_tracee's `lock orb
// $0`, which changes no byte either): the drain's write(2) reads the rings through this view, in
// kernel mode, which pays the same first-access exit once per page (drain-copy.c: the first lap
// of a ring cost 87 ns per record into ext4, the laps after it 5).
void warm_our_view(int fd, const std::uint8_t* view, std::uint64_t size) {
  for (std::uint64_t at = 0; at < size; at += 4096)
    if (::pwrite(fd, view + at, 1, static_cast<off_t>(at)) != 1) return;
}

// Every page of [at, at + size) written once by the process itself, in user mode: on this
// guest (a PVM hypervisor: shadow page tables) the first user-mode access to a page in each
// address space exits to the hypervisor, ~7 us, however populated the page is: neither
// MAP_POPULATE, MADV_POPULATE_WRITE, a write by another process to the same memfd pages, nor the
// kernel's own accesses through the address (read(2) into it) spare it (scripts/record-cost.sh).
// Without this, the trampolines paid it, one 4 KiB page of records at a time (compare's record
// row: ~110 of its 134 ns per call). `lock orb $0` changes no byte, even if a writer were there.
// The loop runs on a page of its own (breakpoint/in_tracee/warm_loop.hpp), mapped for it and gone
// after; it ends in `syscall; leave; ret` (getpid), the way back RemoteCalls::run_code needs, and a
// probecost killed meanwhile leaves the thread in it for the next attach to take out
// (tracer/core/left_loops.hpp). False (and `why`) when it could not run.
bool warm_in_tracee(TracedProcess& proc, RuntimeAddr at, std::uint64_t size, std::string& why) {
  std::optional<long> page, r;
  try {
    page = proc.calls().syscall(
        SYS_mmap, {0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0});
    if (!page || (*page < 0 && *page > -4096)) {
      why = page ? std::string("mmap: ") + std::strerror(static_cast<int>(-*page)) : "no thread";
      return false;
    }
    RuntimeAddr code(static_cast<std::uint64_t>(*page));
    proc.memory().write(code, warm::page_bytes(code, ::getpid()));
    r = proc.calls().run_code(
        code + warm::kCodeOffset, code + warm::kSyscallOffset, SYS_getpid,
        {static_cast<long>(at.value()), static_cast<long>(at.value() + size)});
  } catch (const Error& e) {
    why = e.what();  // a seccomp filter that refuses one of the calls, a thread gone
  }
  std::optional<long> unmapped;
  try {
    if (page && *page > 0) unmapped = proc.calls().syscall(SYS_munmap, {*page, 4096, 0, 0, 0, 0});
  } catch (const Error&) {
    // No thread can run it now: the detach's release tries again.
  }
  if (page && *page > 0 && unmapped != 0)
    proc.space().our_mappings().add(
        {OurMapping::Kind::WarmPage, RuntimeAddr(static_cast<std::uint64_t>(*page)), kPageSize, 0});
  if (!r && why.empty()) why = "no thread could run it with a way back";
  return r.has_value() && *r > 0;
}

}  // namespace

JumpProbes::Area JumpProbes::map_area(RuntimeAddr near) {
  Area a;
  lent_once("the jump's trampoline area", [&] { a = map_area_in(near); });
  return a;
}

JumpProbes::Area JumpProbes::map_area_in(RuntimeAddr near) {
  Undo undo{[this](long nr, const std::array<long, 6>& a, const char* w) {
    return tracee_syscall(nr, a, w);
  }};
  undo.size = layout_.size;
  shared_memfd(proc_, undo, jump::kAreaName, "the jump's trampoline area");
  long fd = undo.tracee_fd;
  void* view = undo.view;

  // In the tracee: within +-2 GiB of the site (less the area and a margin), so that the jump
  // and the trampolines' RIP-relative operands reach.
  std::uint64_t reach = (1ull << 31) - undo.size - (1ull << 20);
  auto hint = free_range_near(proc_.maps(), near, undo.size, reach);
  if (!hint)
    throw Error("no free address range within reach of " + near.hex() + " for a jump area");
  long at = tracee_syscall(SYS_mmap,
                           {static_cast<long>(hint->value()), static_cast<long>(undo.size),
                            PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0},
                           "mmap of a jump area");
  if (at < 0 && at > -4096) throw failed("mmap of a jump area", proc_.pid(), at);
  undo.tracee_at = at;
  // The trampolines, read and execute only (we write them through our view), mapped over the
  // area's code pages rather than made executable with mprotect: the kernel's
  // PR_SET_MDWE_REFUSE_EXEC_GAIN and systemd's MemoryDenyWriteExecute= refuse a mapping that
  // gains PROT_EXEC, not one made executable and never writable.
  long code = tracee_syscall(
      SYS_mmap,
      {static_cast<long>(at + layout_.code_offset), static_cast<long>(layout_.code_size),
       PROT_READ | PROT_EXEC, MAP_SHARED | MAP_FIXED, fd, static_cast<long>(layout_.code_offset)},
      "mmap of the trampolines");
  if (refused(code)) {
    mapping_refused_ = failed("mmap(PROT_EXEC) of the jump trampolines", proc_.pid(), code).what() +
                       std::string(": the process refuses executable mappings");
    throw Error(mapping_refused_);
  }
  if (code < 0 && code > -4096) throw failed("mmap of the trampolines", proc_.pid(), code);
  // In the process's page tables now, its code pages too: else the first call through a
  // trampoline is a page fault (an instruction fetch), the one a recording still took after
  // its call buffer was populated (RecordAttach.NoPageFaultInTheProgramAfterTheAttach).
  fault_in(proc_.pid(), RuntimeAddr(static_cast<std::uint64_t>(at)), undo.size);
  tracee_syscall(SYS_close, {fd, 0, 0, 0, 0, 0}, "close of the jump area's fd");
  undo.tracee_fd = -1;

  Area a;
  a.view = static_cast<std::uint8_t*>(view);
  a.size = undo.size;
  a.tracee_at = RuntimeAddr(static_cast<std::uint64_t>(at));
  a.writer = std::make_unique<jump::AreaWriter>(std::span(a.view, a.size), a.tracee_at, layout_,
                                                ::getpid());
  proc_.space().our_mappings().add({OurMapping::Kind::JumpArea, a.tracee_at, a.size, undo.inode});
  undo.tracee_at = 0;
  undo.view = nullptr;
  return a;
}

JumpProbes::CallBuffer JumpProbes::map_call_buffer(const jump::CallBufferLayout& layout) {
  Undo undo{[this](long nr, const std::array<long, 6>& a, const char* w) {
    return tracee_syscall(nr, a, w);
  }};
  undo.size = layout.size;
  // Populated now, while the threads are stopped anyway: else each first write into a page of
  // the rings is a page fault in the writer (a 4 KiB page holds 128 records: ~10 ns more per
  // record until every ring has wrapped once). But never inside the injected mmap: a
  // MAP_POPULATE there ran 20 to 210 ms (32 MiB, load 14) with the thread's registers
  // borrowed, and a SIGKILL of probecost meanwhile let it go so (7 of 20 killed within 0.3 s
  // of the seize died of SIGSEGV, issue 23 item 2; 3.4 ms still with the pages made first).
  // So we allocate and zero the pages (in our mapping), and map them into the tracee's page
  // tables afterwards by reading a byte of each (fault_in), with its registers its own.
  proc_.held().mark("calls: before the call buffer");
  long at = 0;
  lent_once("the call buffer", [&] {
    shared_memfd(proc_, undo, jump::kCallBufferName, "the call buffer");
    // Anywhere: the trampolines load its address whole. Data only, read-write.
    at = tracee_syscall(
        SYS_mmap,
        {0, static_cast<long>(undo.size), PROT_READ | PROT_WRITE, MAP_SHARED, undo.tracee_fd, 0},
        "mmap of the call buffer");
    if (at < 0 && at > -4096) throw failed("mmap of the call buffer", proc_.pid(), at);
    undo.tracee_at = at;
    // Its header at once, and the process's fd closed, before the pages are made (20-40 ms) and
    // written through (the warm loop, ~250 ms): from here a SIGKILL of probecost leaves a mapping
    // that `probecost restore` can tell is ours and unmap, and no fd. Formatted after the loop
    // and closed after it, as they were, a death there left 32 MiB that restore could not claim,
    // pinned besides by an fd in the process (4 of 12 SIGKILLs 0.4-0.9 s into `record -p`).
    jump::format_call_buffer({static_cast<std::uint8_t*>(undo.view), undo.size},
                             static_cast<std::uint64_t>(at), layout);
    tracee_syscall(SYS_close, {undo.tracee_fd, 0, 0, 0, 0, 0}, "close of the call buffer's fd");
    undo.tracee_fd = -1;
  });
  populate(static_cast<std::uint8_t*>(undo.view), undo.size);
  proc_.held().mark("call buffer: allocated (our mapping, populated)");
  fault_in(proc_.pid(), RuntimeAddr(static_cast<std::uint64_t>(at)), undo.size);
  proc_.held().mark("call buffer: mapped in the process");
  fault_plan::at_stage("warm");
  std::string why;
  // Written through unless PROBECOST_COLD_RINGS=1. The loop is an injected call of 100-250 ms
  // here with a way back: a SIGKILL of probecost inside it lets the thread finish it and return
  // to its own registers by itself, and the next attach (restore's too) takes a thread still in
  // it the rest of its way first (tracer/core/left_loops.hpp). Before that, restore unmapped the
  // buffer under the loop (the fault suite's record-sigkill: 5 of 40 cycles killed the program
  // by SIGSEGV), and the loop was opt-in.
  const char* cold = std::getenv("PROBECOST_COLD_RINGS");
  if (options_.calls.warm && !(cold && *cold == '1')) {
    // Ours meanwhile, on the other CPU: the process's loop is mostly the hypervisor's time.
    std::jthread ours(warm_our_view, undo.ours.get(), static_cast<std::uint8_t*>(undo.view),
                      undo.size);
    if (!warm_in_tracee(proc_, RuntimeAddr(static_cast<std::uint64_t>(at)), undo.size, why))
      warm_why_ = "the call buffer was not written through first (" + why +
                  "): the first records into each of its pages pay for it";
  }
  proc_.held().mark("call buffer: written once by the process");
  CallBuffer b;
  b.view = static_cast<std::uint8_t*>(undo.view);
  b.size = undo.size;
  b.tracee_at = RuntimeAddr(static_cast<std::uint64_t>(at));
  proc_.space().our_mappings().add({OurMapping::Kind::CallBuffer, b.tracee_at, b.size, undo.inode});
  undo.tracee_at = 0;
  undo.view = nullptr;
  return b;
}

void JumpProbes::unmap_area(Area& area) {
  try {
    tracee_syscall(
        SYS_munmap,
        {static_cast<long>(area.tracee_at.value()), static_cast<long>(area.size), 0, 0, 0, 0},
        "munmap of a jump area");
  } catch (const Error&) {
    // No thread can run it now: the unused area stays (nothing jumps into it).
  }
  proc_.space().our_mappings().forget(area.tracee_at);
  ::munmap(area.view, area.size);
  area.view = nullptr;
}

}  // namespace probecost
