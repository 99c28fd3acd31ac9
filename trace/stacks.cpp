// `trace --stacks` on jump probes (issue 26): the snapshots' feed started once the image's
// probes are in, each new thread's stack bounds entered before it runs, and the stacks
// unwound and counted once the probes are out.
#include "trace/run.hpp"
#include "tracer/os/seccomp.hpp"

namespace probecost::trace_run {

void TraceRun::start_stack_feed(ProcessTrace& tr) {
  if (!opts_.stacks || !tr.jumps || tr.stack_feed) return;
  jump::CallReader* reader = tr.jumps->call_reader();
  if (!reader) return;
  TracedProcess& p = *tr.proc;
  // A seccomp filter applies to the trampolines' futex calls too (see calls.cpp).
  bool syscalls = !seccomp::any_thread_under_seccomp(p.pid());
  tr.stack_feed = std::make_unique<StackFeed>(*reader, p.pid(), opts_.stack_depth, syscalls);
  ProcessTrace* t = &tr;
  p.set_new_stack_observer([t](pid_t tid, std::uint64_t tp, std::uint64_t sp) {
    if (t->jumps) t->jumps->enter_new_thread(tid, tp, sp);
  });
  // Each thread stops at its exit, where its entry in the thread table is freed (follow.cpp):
  // else a slot's 8 entries fill with gone threads and the next get no copy.
  p.report_thread_exits();
  p.held().mark("stacks: the snapshots' feed");
}

void TraceRun::finish_stack_feed(ProcessTrace& tr) {
  if (!tr.stack_feed) return;
  tr.proc->set_new_stack_observer(nullptr);
  ProcessSymbols* symbols = tr.symbols.get();
  tr.stack_feed->finish(
      [&](std::uint64_t site, const std::vector<std::uint64_t>& ips, std::uint64_t n) {
        if (symbols) tr.rec.add_stack(*symbols, site, ips, n);
      });
  const SnapshotCounts& c = tr.stack_feed->counts();
  report_.snapshots += c.snapshots;
  report_.snapshots_unwound += c.unwound;
  report_.snapshots_truncated += c.truncated;
  for (const auto& [why, n] : c.not_copied)
    report_.snapshots_not_copied[jump::bound_name(why)] += n;
  report_.snapshot_unwind_s += c.unwind_s;
  report_.snapshots_needed.resize(kNeededBuckets);
  for (std::size_t i = 0; i < kNeededBuckets; ++i) report_.snapshots_needed[i] += c.needed[i];
  if (const jump::CallReader* reader = tr.jumps ? tr.jumps->call_reader() : nullptr)
    report_.snapshots_lost += reader->lost_total();
  if (!tr.stack_feed->error().empty() && opts_.announce)
    notes_ << opts_.tool << ": the stack snapshots of process " << tr.proc->pid()
           << " stopped being read: " << tr.stack_feed->error() << std::endl;
  tr.stack_feed.reset();
}

}  // namespace probecost::trace_run

namespace probecost {

std::map<std::string, std::uint64_t> needed_summary(const std::vector<std::uint64_t>& buckets) {
  std::uint64_t all = 0;
  for (auto n : buckets) all += n;
  std::map<std::string, std::uint64_t> out;
  if (!all) return out;
  // The bytes under which `share` of the stacks fit (a bucket's upper end).
  auto quantile = [&](double share) {
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      seen += buckets[i];
      if (static_cast<double>(seen) >= share * static_cast<double>(all)) return 256 * i;
    }
    return 256 * (buckets.size() - 1);
  };
  out["median"] = quantile(0.5);
  out["p90"] = quantile(0.9);
  out["p99"] = quantile(0.99);
  out["max"] = quantile(1.0);
  for (std::uint64_t size : {4096u, 8192u, 16384u}) {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i <= size / 256 && i < buckets.size(); ++i) n += buckets[i];
    out["within_" + std::to_string(size)] = n;
  }
  return out;
}

}  // namespace probecost
