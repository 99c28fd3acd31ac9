#include "tracer/int3/int3_area.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstddef>
#include <fstream>

#include "breakpoint/in_tracee/trap_handler.hpp"
#include "common/error.hpp"
#include "tracer/int3/trap_handler_state.hpp"
#include "tracer/int3/trap_records.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/memory.hpp"
#include "tracer/os/remote_process.hpp"
#include "tracer/os/seccomp.hpp"

namespace probecost {

namespace {

constexpr std::uint32_t kRecords = 1024;  // 80 KiB of records, touched only as used
constexpr std::uint32_t kCopies = 256;    // 8 KiB of 32-byte copies

// mmap of `size` bytes near `near` in the tracee: its address, or why not.
std::optional<RuntimeAddr> map_in(RemoteProcess& proc, RuntimeAddr near, std::uint64_t size,
                                  long prot, std::string& why) {
  constexpr std::uint64_t kReach = (1ull << 31) - (1ull << 24);
  auto hint = free_range_near(proc.maps(), near, size, kReach);
  long flags = MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0);
  std::optional<long> r;
  try {
    r = proc.remote_syscall(SYS_mmap, {static_cast<long>(hint ? hint->value() : 0),
                                       static_cast<long>(size), prot, flags, -1, 0});
  } catch (const seccomp::Refused& e) {
    why = e.what();
    return std::nullopt;
  }
  if (!r) {
    why = "no thread of the process can make a system call now";
    return std::nullopt;
  }
  if (*r < 0 && *r > -4096) {
    why = std::string("mmap: ") + std::strerror(static_cast<int>(-*r));
    return std::nullopt;
  }
  return RuntimeAddr(static_cast<std::uint64_t>(*r));
}

// The arguments the handler passes to system call `nr` in thread `tid`, as a filter sees
// them: pointers are somewhere non-null (into the area, or a stack: a filter cannot know).
std::array<long, 6> handler_args(long nr, pid_t pid, pid_t tid, RuntimeAddr area) {
  long p = static_cast<long>(area.value());
  switch (nr) {
    case SYS_rt_sigaction:  // SIG_DFL (reset, default action)
      return {SIGTRAP, p + static_cast<long>(offsetof(trap::TrapHeader, dfl)), 0, 8, 0, 0};
    case SYS_rt_sigprocmask:
      return {SIG_SETMASK, p, 0, 8, 0, 0};
    case SYS_rt_tgsigqueueinfo:
      return {pid, tid, SIGTRAP, p, 0, 0};
  }
  return {};
}

// Threads of `proc` that block SIGTRAP now (SigBlk of /proc/TID/status).
std::vector<pid_t> threads_blocking_sigtrap(RemoteProcess& proc) {
  std::vector<pid_t> out;
  for (pid_t tid : proc.thread_ids(false)) {
    std::ifstream in("/proc/" + std::to_string(tid) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("SigBlk:", 0) != 0) continue;
      if (std::stoull(line.substr(7), nullptr, 16) & (1ull << (SIGTRAP - 1))) out.push_back(tid);
      break;
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Int3Area> Int3Area::map(RemoteProcess& proc, RuntimeAddr near) {
  // The area's mmap and the handler's two rt_sigaction calls in one lending of a thread; the
  // threads' masks read after it (SIGTRAP is unblocked in the lent one meanwhile).
  std::unique_ptr<Int3Area> area;
  if (!proc.in_one_lending([&] { area = map_lent(proc, near); }) || !area) return nullptr;
  if (area->installed_) area->note_blocking();
  return area;
}

std::unique_ptr<Int3Area> Int3Area::map_lent(RemoteProcess& proc, RuntimeAddr near) {
  std::string why_exec, why;
  trap::Layout layout = trap::Layout::of(kRecords, true, kCopies);
  auto at = map_in(proc, near, layout.size, PROT_READ | PROT_EXEC, why_exec);
  if (!at) {
    // The records alone: restore still finds every int3 of ours.
    layout = trap::Layout::of(kRecords, false);
    at = map_in(proc, near, layout.size, PROT_READ, why);
    if (!at) return nullptr;
  }
  auto writer = std::make_unique<trap::AreaWriter>(proc.memory(), *at, layout, ::getpid());
  std::unique_ptr<Int3Area> area(new Int3Area(proc, std::move(writer)));
  if (!layout.code_size) {
    area->how_ = "no in-process SIGTRAP handler (an executable mapping for it: " + why_exec +
                 "); the guardian puts the bytes back";
    area->caveat_ = true;
    return area;
  }
  area->install_handler();
  return area;
}

std::unique_ptr<Int3Area> Int3Area::inherit(RemoteProcess& child, const Int3Area& parent) {
  auto writer = std::make_unique<trap::AreaWriter>(parent.writer_->copy_for(child.memory()));
  std::unique_ptr<Int3Area> area(new Int3Area(child, std::move(writer)));
  area->installed_ = parent.installed_;
  area->program_handler_ = parent.program_handler_;
  area->how_ = parent.how_;
  return area;
}

Int3Area::~Int3Area() = default;

std::optional<std::string> Int3Area::why_no_handler() {
  // Every call the handler may make, as it makes it, in every thread that may take a SIGTRAP.
  for (pid_t tid : proc_.thread_ids(true)) {
    auto filters = seccomp::ThreadFilters::of(tid);
    for (const auto& c : writer_->calls()) {
      auto o = filters.fate(seccomp::x86_64_call(
          c.nr, handler_args(c.nr, proc_.pid(), tid, address()), c.at.value()));
      if (o.kind != seccomp::ThreadFilters::Fate::Kind::Runs)
        return "in thread " + std::to_string(tid) + ", " + o.why;
    }
  }
  return std::nullopt;
}

void Int3Area::install_handler() {
  caveat_ = true;  // until the handler is in, and covers every thread
  if (auto why = why_no_handler()) {
    how_ = "no in-process SIGTRAP handler (" + *why + "); the guardian puts the bytes back";
    return;
  }
  try {
    set_handler();
  } catch (const seccomp::Refused& e) {
    writer_->set_state(trap::HandlerState::None);  // the call did not run
    how_ = std::string("no in-process SIGTRAP handler (") + e.what() +
           "); the guardian puts the bytes back";
  }
}

void Int3Area::set_handler() {
  auto program = sigtrap_disposition(proc_);
  if (!program) {
    how_ = "no in-process SIGTRAP handler (the SIGTRAP disposition could not be read now)";
    return;
  }
  trap::KernelSigaction ours =
      trap::our_disposition(*program, writer_->handler(), writer_->restorer());
  writer_->set_dispositions(*program, ours);
  // Installed in the header before the call that installs it: a death of probecost right after
  // that call (before a write of the header after it) left the area saying None, and restore
  // then left our handler as the program's disposition (RecordDeath under ASan, attach+145).
  // Said before, restore compares the disposition with ours first: a call that never ran, or
  // failed, leaves nothing for it to take out.
  writer_->set_state(trap::HandlerState::Installed);
  if (!set_sigtrap_disposition(proc_, address() + offsetof(trap::TrapHeader, ours))) {
    writer_->set_state(trap::HandlerState::None);
    how_ = "no in-process SIGTRAP handler (rt_sigaction failed)";
    return;
  }
  installed_ = true;
  program_handler_ = program->handler;
  how_ = "an in-process SIGTRAP handler at " + writer_->handler().hex() +
         " takes a hit if probecost dies";
}

void Int3Area::note_blocking() {
  auto blocking = threads_blocking_sigtrap(proc_);
  blocking_ = blocking;
  caveat_ = !blocking.empty();
  if (!blocking.empty()) {
    how_ += "; but thread " + std::to_string(blocking.front()) +
            " blocks SIGTRAP, and a hit there with no tracer is killed whatever the handler "
            "(the kernel resets a blocked forced SIGTRAP to SIG_DFL): the guardian is its "
            "backstop";
  }
}

std::optional<Instruction> Int3Area::decode_at(RuntimeAddr site) {
  std::array<std::uint8_t, 15> bytes{};
  for (std::size_t n = bytes.size(); n > 0; --n) {
    try {
      proc_.memory().read(site, {bytes.data(), n});
      return decode({bytes.data(), n}, site);
    } catch (const Error&) {
      // The instruction ends near the end of its mapping: read less.
    }
  }
  return std::nullopt;
}

bool Int3Area::record(RuntimeAddr site, std::uint8_t original) {
  if (gone_) return false;
  if (writer_->full()) {
    how_ += "; the trap area is full: later int3 probes have no record";
    return false;
  }
  auto in = decode_at(site);
  if (!in) return false;
  trap::SiteRecord r;
  r.site = site;
  r.original = original;
  r.length = in->length;
  r.moved = trap::moved_addresses(*in, RuntimeAddr());
  std::string why;
  if (writer_->layout().code_size) r.resume = writer_->place_copy(*in, why).value_or(RuntimeAddr());
  if (const Mapping* m = proc_.mapping_at(site)) r.file = file_identity(*m, site);
  return writer_->add(r);
}

std::string Int3Area::caveat() {
  if (caveat_said_ || !caveat_) return {};
  caveat_said_ = true;
  return "if probecost is killed: " + how_;
}

void Int3Area::tracer_copy(RuntimeAddr site, RuntimeAddr copy) {
  if (gone_) return;
  writer_->set_moved(site, 0, copy);
  // The tracer's copy is near the site: the handler resumes there too when the area is too far
  // from the site for a copy of its own (a RIP-relative operand out of reach).
  writer_->set_resume_if_none(site, copy);
}

void Int3Area::removed(RuntimeAddr site) {
  if (!gone_) writer_->remove(site);
}

// An int3 hit in a thread that blocks SIGTRAP: the kernel forces the signal
// (force_sig_info_to_task), and a forced signal that is blocked has its disposition reset to
// SIG_DFL for the whole process and is unblocked in that thread, tracer or no tracer. The
// program would die of its next SIGTRAP, which it meant to handle or to keep pending (review
// H3: 2 of 2 launched, 2 of 2 attached). SIG_DFL where ours was is that reset (a program that
// sets SIG_DFL itself meanwhile is taken for it): the program's disposition goes back, and the
// threads that blocked SIGTRAP when we came block it again.
void Int3Area::undo_forced_reset() {
  put_back_now();
  constexpr std::uint64_t bit = 1ull << (SIGTRAP - 1);
  for (pid_t tid : blocking_) {
    auto mask = proc_.thread_blocked_signals(tid);
    if (mask && !(*mask & bit)) proc_.set_thread_blocked_signals(tid, *mask | bit);
  }
}

// The disposition, asked of another thread when the one that ran the call could not: a thread
// that exits, forks or takes an event while it runs it fails it ("went away"), and our handler
// stayed the program's disposition after detach (fault_regression NoStraySigtrap on churning
// threads: 2 of 100 detaches; follow-forks 1 of 8 cycles, load 10-40).
std::optional<trap::KernelSigaction> Int3Area::disposition_now() {
  constexpr int kTries = 4;
  for (int i = 0; i < kTries; ++i) {
    try {
      if (auto now = sigtrap_disposition(proc_)) return now;
    } catch (const Error&) {
      // That thread went away: another, if any is left.
    }
  }
  return std::nullopt;
}

bool Int3Area::put_back_now() {
  constexpr int kTries = 4;
  for (int i = 0; i < kTries; ++i) {
    try {
      if (put_back_disposition(proc_, address())) return true;
    } catch (const Error&) {
      // As above.
    }
  }
  return false;
}

bool Int3Area::let_go() {
  if (gone_) return false;
  writer_->remove_all();
  if (!installed_) return !let_go_tried_;  // no handler went in (or a failed let_go before)
  installed_ = false;
  let_go_tried_ = true;
  auto now = disposition_now();
  if (!now) return false;  // not known now: ours stays (it passes everything on), restore can look
  if (now->handler == writer_->handler().value()) return put_back_now();
  if (now->handler == reinterpret_cast<std::uint64_t>(SIG_DFL) &&
      program_handler_ != now->handler) {
    undo_forced_reset();
    auto after = disposition_now();
    return after && after->handler != writer_->handler().value();
  }
  // The program has set its own since: it stays as it is.
  writer_->set_state(trap::HandlerState::PutBack);
  return true;
}

}  // namespace probecost
