// int3 probes' stacks (issue 26 item 5): the thread is stopped at the site either way; its
// registers and the top of its stack are copied with one process_vm_readv, as a jump's
// trampoline copies them, and unwound by the jump snapshots' unwinder (SnapshotUnwinder, libdw
// over the copy): one unwinder for both. Where the copy cannot give the whole stack (deeper
// than its bytes, or a frame in no module the unwinder knew of: a library loaded since, after
// which it reads the maps again, once), libunwind over ptrace does it, as before, reading
// memory on demand. PROBECOST_STACKS_CHECK=1 unwinds every int3 hit both ways and counts the
// hits whose stacks differ (TraceStacks.Int3SnapshotsGiveThePtraceStacks).
#include <sys/uio.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "breakpoint/in_tracee/stack_record.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "trace/run.hpp"
#include "trace/stack_copy.hpp"

namespace probecost::trace_run {

// Page by page: process_vm_readv never splits an iovec element, so one element per page gives
// every readable page up to the first that is not (the stack's end).
void read_stack(pid_t tid, std::uint64_t sp, std::uint32_t bytes, std::vector<std::uint8_t>& out) {
  constexpr std::uint64_t kPage = 4096;
  out.resize(bytes);
  std::vector<iovec> local, remote;
  for (std::uint64_t at = sp, end = sp + bytes; at < end;) {
    std::uint64_t next = std::min(end, (at / kPage + 1) * kPage);
    local.push_back({out.data() + (at - sp), next - at});
    remote.push_back({reinterpret_cast<void*>(at), next - at});
    at = next;
  }
  ssize_t n = ::process_vm_readv(tid, local.data(), local.size(), remote.data(), remote.size(), 0);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
}

namespace {

bool check_both_ways() {
  static const bool on = [] {
    const char* e = std::getenv("PROBECOST_STACKS_CHECK");
    return e && *e == '1';
  }();
  return on;
}

}  // namespace

// The hit's stack from a copy, or nothing where the copy cannot give it whole.
std::vector<std::uint64_t> HitBook::snapshot_stack(pid_t pid, pid_t tid, const user_regs_struct& r,
                                                   std::uint64_t site) {
  if (!unwinder) {
    try {
      unwinder = std::make_unique<SnapshotUnwinder>(pid, stack_depth);
    } catch (const Error&) {
      return {};
    }
  }
  read_stack(tid, r.rsp, snapshot_bytes, stack_copy);
  jump::StackSnapshot s;
  s.rip = site;
  s.sp = r.rsp;
  s.rbp = r.rbp, s.rbx = r.rbx, s.r12 = r.r12, s.r13 = r.r13, s.r14 = r.r14, s.r15 = r.r15;
  s.stack = stack_copy;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto st = unwinder->unwind(s);
    if (st.ips.empty()) return {};
    // A walk that ends in no module it knows: a library came since the maps were read (its
    // CFI unknown, the walk may also have read outside the copy for want of it).
    std::uint64_t last = st.ips.size() > 1 ? st.ips.back() - 1 : st.ips.back();
    if (!unwinder->knows(last)) {
      // Once per page of code no module holds (JIT code stays unknown: ptrace, no refresh).
      if (attempt == 0 && no_module.insert(last >> 12).second) {
        try {
          unwinder->refresh();
          continue;
        } catch (const Error&) {
        }
      }
      return {};
    }
    if (st.truncated) return {};
    return std::move(st.ips);
  }
  return {};
}

void HitBook::record_stack(ProcessSymbols& symbols, pid_t pid, pid_t tid, StoppedThread& thread,
                           BreakpointSite& site) {
  double t0 = now_s();
  // Unwind from the site itself, not from one past the int3: the unwind tables describe the
  // site's first instruction as not yet executed.
  thread.set_pc(site.address());
  auto ips = snapshot_stack(pid, tid, thread.regs(), site.address().value());
  if (ips.empty()) {
    ++ptrace_unwinds;
    ips = collector->capture(tid);
  } else if (check_both_ways()) {
    ++checked;
    if (ips != collector->capture(tid)) ++differed;
  }
  add_stack(symbols, site.address().value(), ips);
  stack_seconds += now_s() - t0;
}

}  // namespace probecost::trace_run
