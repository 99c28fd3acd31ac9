#include "tracer/core/our_mappings.hpp"

#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "breakpoint/in_tracee/semaphore_table.hpp"
#include "breakpoint/in_tracee/trap_area.hpp"
#include "breakpoint/in_tracee/warm_loop.hpp"
#include "breakpoint/int3/outline.hpp"
#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/core/stacks.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

// Frames walked per thread looking for signal frames, as JumpProbes does.
constexpr unsigned kMaxFrames = 256;
constexpr char kOurs[] = "/memfd:probecost-";

bool inside(const OurMapping& m, RuntimeAddr at) {
  return m.start <= at && at < m.start + static_cast<std::int64_t>(m.size);
}

std::uint64_t inode_of(const Mapping& m) {
  auto colon = m.file_id.rfind(':');
  return colon == std::string::npos ? 0 : std::stoull(m.file_id.substr(colon + 1));
}

// Why `m` must not be unmapped as it is in `maps`: a mapping in its range that is not the
// memfd we made (the program unmapped ours and mapped something there), or nothing of it left.
std::string why_not_ours(const std::vector<Mapping>& maps, const OurMapping& m) {
  RuntimeAddr end = m.start + static_cast<std::int64_t>(m.size);
  bool any = false;
  for (const Mapping& x : maps) {
    if (x.end <= m.start || x.start >= end) continue;
    if (x.path.rfind(kOurs, 0) != 0 || inode_of(x) != m.inode)
      return "the program has mapped " + (x.path.empty() ? std::string("memory") : x.path) +
             " at " + x.start.hex() + " since";
    any = true;
  }
  return any ? "" : "the program has unmapped it itself";
}

// The same for the trap area (tracer/int3/int3_area.hpp) and the semaphore table, anonymous
// memory: every mapping in its range anonymous, and its header still ours (magic, address,
// size, and the probecost that wrote it), never a program's memory mapped where it was.
template <typename Header>
std::string why_not_our_anonymous(TracedProcess& proc, const std::vector<Mapping>& maps,
                                  const OurMapping& m, const char (&magic)[8]) {
  RuntimeAddr end = m.start + static_cast<std::int64_t>(m.size), covered = m.start;
  for (const Mapping& x : maps) {
    if (x.end <= m.start || x.start >= end) continue;
    if (!x.path.empty() || inode_of(x) != 0 || x.start > covered)
      return "the program has mapped " + (x.path.empty() ? std::string("memory") : x.path) +
             " at " + x.start.hex() + " since";
    covered = x.end;
  }
  if (covered < end) return "the program has unmapped it itself";
  Header h{};
  try {
    proc.memory().read(m.start, {reinterpret_cast<std::uint8_t*>(&h), sizeof h});
  } catch (const Error& e) {
    return std::string("its header cannot be read (") + e.what() + ")";
  }
  pid_t writer = m.tracer_pid ? m.tracer_pid : ::getpid();
  if (std::memcmp(h.magic, magic, sizeof h.magic) != 0 || h.area_address != m.start.value() ||
      h.area_size != m.size || h.tracer_pid != writer)
    return "its header is not the one probecost wrote";
  return "";
}

std::string why_not_taken_out(TracedProcess& proc, const std::vector<Mapping>& maps,
                              const OurMapping& m) {
  switch (m.kind) {
    case OurMapping::Kind::TrapArea:
      return why_not_our_anonymous<trap::TrapHeader>(proc, maps, m, trap::kMagic);
    case OurMapping::Kind::SemaphoreTable:
      return why_not_our_anonymous<sema::TableHeader>(proc, maps, m, sema::kMagic);
    case OurMapping::Kind::ScratchPage:
      return why_not_our_anonymous<ScratchHeader>(proc, maps, m, kScratchMagic);
    case OurMapping::Kind::WarmPage:
      return why_not_our_anonymous<ScratchHeader>(proc, maps, m, warm::kMagic);
    default:
      return why_not_ours(maps, m);
  }
}

// Where every thread is or will return to; false when one cannot be known (a thread not in a
// ptrace-stop, or in vfork(): it runs on in this address space).
bool thread_pcs(TracedProcess& proc, std::vector<std::pair<pid_t, RuntimeAddr>>& out,
                std::string& why) {
  std::unique_ptr<StackCollector> unwinder;
  try {
    unwinder = std::make_unique<StackCollector>(kMaxFrames);
  } catch (const Error& e) {
    why = std::string("its threads' stacks cannot be walked (") + e.what() + ")";
    return false;
  }
  for (auto& [tid, t] : proc.threads()) {
    if (!t.stopped() || t.in_vfork) {
      why = "thread " + std::to_string(tid) + " is not stopped where it can be looked at";
      return false;
    }
    auto rip = t.rip();
    if (!rip) continue;  // gone meanwhile
    out.emplace_back(tid, *rip);
    try {
      for (auto pc : unwinder->interrupted_pcs(tid)) out.emplace_back(tid, RuntimeAddr(pc));
    } catch (const Error&) {
      // Gone meanwhile: nothing of it to look at.
    }
  }
  return true;
}

// The rseq_cs of each stopped thread that points into a mapping about to go: cleared (what the
// kernel does itself at the thread's next preemption, as its RIP is outside the sequence).
void clear_rseq_cs(TracedProcess& proc, const std::vector<OurMapping>& going) {
  for (auto& [tid, t] : proc.threads()) {
    __ptrace_rseq_configuration conf{};
    if (sys::ptrace_call(PTRACE_GET_RSEQ_CONFIGURATION, tid, reinterpret_cast<void*>(sizeof conf),
                         &conf) < 0 ||
        !conf.rseq_abi_pointer || conf.rseq_abi_size < 16)
      continue;
    RuntimeAddr field(conf.rseq_abi_pointer + 8);  // struct rseq's rseq_cs
    try {
      std::uint64_t cs = 0;
      proc.memory().read(field, {reinterpret_cast<std::uint8_t*>(&cs), sizeof cs});
      bool ours = std::any_of(going.begin(), going.end(),
                              [cs](const OurMapping& m) { return inside(m, RuntimeAddr(cs)); });
      if (!ours) continue;
      const std::uint64_t zero = 0;
      proc.memory().write(field, {reinterpret_cast<const std::uint8_t*>(&zero), sizeof zero});
    } catch (const Error&) {
      // Gone meanwhile, its memory with it.
    }
  }
}

// A thread that is in a warm loop, or will return into one (a handler that interrupted it):
// it writes into the call buffer until its loop ends (tracer/core/left_loops.hpp moves the
// threads it can out at attach).
std::optional<pid_t> in_a_warm_loop(TracedProcess& proc,
                                    const std::vector<std::pair<pid_t, RuntimeAddr>>& pcs) {
  for (const auto& [tid, pc] : pcs) {
    RuntimeAddr page(pc.value() & ~std::uint64_t{kPageSize - 1});
    std::array<std::uint8_t, warm::kCodeOffset + sizeof warm::kLoop> first{};
    try {
      proc.memory().read(page, first);
    } catch (const Error&) {
      continue;
    }
    if (warm::is_warm_page(first, page)) return tid;
  }
  return std::nullopt;
}

std::string mib(std::uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

}  // namespace

std::string OurMapping::describe() const {
  const char* what = kind == Kind::JumpArea         ? "jump area"
                     : kind == Kind::TrapArea       ? "trap area"
                     : kind == Kind::SemaphoreTable ? "USDT semaphore table"
                     : kind == Kind::ScratchPage    ? "step-over scratch page"
                     : kind == Kind::WarmPage       ? "warm loop page"
                                                    : "call buffer";
  return std::string(what) + " at " + start.hex() + " (" + mib(size) + ")";
}

void OurMappings::forget(RuntimeAddr start) {
  std::erase_if(list_, [start](const OurMapping& m) { return m.start == start; });
}

bool OurMappings::holds(RuntimeAddr start) const {
  return std::any_of(list_.begin(), list_.end(),
                     [start](const OurMapping& m) { return m.start == start; });
}

void OurMappings::release(TracedProcess& proc) {
  notes_.clear();
  unmapped_bytes_ = 0;
  if (list_.empty()) return;
  std::vector<std::pair<pid_t, RuntimeAddr>> pcs;
  std::string why_all;
  std::vector<Mapping> maps;
  try {
    if (thread_pcs(proc, pcs, why_all)) maps = proc.maps();
  } catch (const Error& e) {
    why_all = e.what();
  }
  // Which go: areas no thread is in, then the buffers if every area goes.
  std::vector<OurMapping> going, kept;
  std::vector<std::string> why_kept;
  auto keep = [&](const OurMapping& m, std::string why) {
    kept.push_back(m);
    why_kept.push_back(std::move(why));
  };
  bool areas_kept = false;  // a jump area stays: the call buffer too
  for (const OurMapping& m : list_) {
    if (m.kind == OurMapping::Kind::CallBuffer) continue;
    auto in =
        std::find_if(pcs.begin(), pcs.end(), [&](const auto& p) { return inside(m, p.second); });
    std::string why = !why_all.empty() ? why_all : why_not_taken_out(proc, maps, m);
    if (why.empty() && in != pcs.end()) {
      why = "thread " + std::to_string(in->first) + " is in it (" + in->second.hex() + ")";
      if (auto s = stuck_.find(in->first); s != stuck_.end()) why += ": " + s->second;
    }
    if (why.empty()) {
      going.push_back(m);
    } else {
      areas_kept |= m.kind == OurMapping::Kind::JumpArea;
      keep(m, why);
    }
  }
  for (const OurMapping& m : list_) {
    if (m.kind != OurMapping::Kind::CallBuffer) continue;
    std::string why = !why_all.empty() ? why_all : why_not_ours(maps, m);
    if (why.empty() && areas_kept) why = "a jump area that writes into it stays";
    if (auto tid = in_a_warm_loop(proc, pcs); why.empty() && tid)
      why = "thread " + std::to_string(*tid) + " writes into it from a warm loop";
    if (why.empty()) {
      going.push_back(m);
    } else {
      keep(m, why);
    }
  }
  clear_rseq_cs(proc, going);
  for (const OurMapping& m : going) {
    std::optional<long> r;
    try {
      r = proc.calls().syscall(
          SYS_munmap, {static_cast<long>(m.start.value()), static_cast<long>(m.size), 0, 0, 0, 0});
    } catch (const std::exception& e) {
      keep(m, std::string("munmap: ") + e.what());
      continue;
    }
    if (!r || *r != 0) {
      keep(m, r ? "munmap failed (" + std::to_string(*r) + ")" : "no thread can run munmap now");
      continue;
    }
    unmapped_bytes_ += m.size;
  }
  for (std::size_t i = 0; i < kept.size(); ++i)
    notes_.push_back("kept the " + kept[i].describe() + ": " + why_kept[i]);
  list_ = kept;
  stuck_.clear();
}

}  // namespace probecost
