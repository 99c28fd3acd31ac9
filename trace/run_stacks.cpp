// `trace --stacks` on jump probes (issue 26): the snapshots' feed started once the image's
// probes are in, each new thread's stack bounds entered before it runs, and the stacks
// unwound and counted once the probes are out. `record --stacks`: the same feed hands each
// entry's snapshot to the image's EntryStacks, whose stacks are named once the feed stops.
#include "trace/run.hpp"
#include "tracer/os/seccomp.hpp"

namespace probecost::trace_run {

void TraceRun::start_stack_feed(ProcessTrace& tr) {
  EntryStacks* entries = opts_.calls && tr.feed ? tr.feed->stacks() : nullptr;
  if (!(opts_.stacks || entries) || !tr.jumps || tr.stack_feed) return;
  jump::CallReader* reader = tr.jumps->stack_reader();
  if (!reader) {
    if (entries && opts_.announce && !tr.jumps->stacks_refused().empty())
      notes_ << opts_.tool << ": " << tr.jumps->stacks_refused() << std::endl;
    return;
  }
  TracedProcess& p = *tr.proc;
  StackFeed::Options o;
  o.max_depth = entries ? opts_.calls->stack_depth : opts_.stack_depth;
  // A seccomp filter applies to the trampolines' futex calls too (see run_calls.cpp).
  o.writers_syscall = !seccomp::any_thread_under_seccomp(p.pid());
  if (entries) {
    // Lossless as record is: a writer with no room waits for the unwinder (--drop: drops).
    o.block = !opts_.calls->drop;
    o.wait_bound_ns = opts_.calls->wait_bound_ns;
    o.each = [entries](std::uint32_t cpu, const jump::StackSnapshot& s,
                       const SnapshotUnwinder::Stack& st) { entries->add(cpu, s, st); };
  }
  tr.stack_feed = std::make_unique<StackFeed>(*reader, p.pid(), o);
  if (entries) {
    // An int3 entry's stack: copied by the ptrace thread, unwound by the feed's.
    StackFeed* feed = tr.stack_feed.get();
    tr.feed->stopped_stacks(
        [feed](const jump::StackSnapshot& s, std::vector<std::uint8_t> bytes) {
          feed->add_stopped(s, std::move(bytes));
        },
        opts_.calls->stack_bytes);
  }
  ProcessTrace* t = &tr;
  p.set_new_stack_observer([t](pid_t tid, std::uint64_t tp, std::uint64_t sp) {
    if (t->jumps) t->jumps->enter_new_thread(tid, tp, sp);
  });
  // Each thread stops at its exit, where its entry in the thread table is freed (run_follow.cpp):
  // else a slot's 8 entries fill with gone threads and the next get no copy.
  p.report_thread_exits();
  p.held().mark("stacks: the snapshots' feed");
}

void TraceRun::finish_stack_feed(ProcessTrace& tr) {
  if (!tr.stack_feed) return;
  tr.proc->set_new_stack_observer(nullptr);
  if (tr.feed) tr.feed->no_more_stopped_stacks();
  ProcessSymbols* symbols = tr.symbols.get();
  tr.stack_feed->finish(
      [&](std::uint64_t site, const std::vector<std::uint64_t>& ips, std::uint64_t n) {
        if (symbols) tr.book.add_stack(*symbols, site, ips, n);
      });
  if (EntryStacks* entries = tr.feed ? tr.feed->stacks() : nullptr) name_entry_stacks(tr, *entries);
  const SnapshotCounts& c = tr.stack_feed->counts();
  report_.snapshots += c.snapshots;
  report_.snapshots_unwound += c.unwound;
  report_.snapshots_truncated += c.truncated;
  for (const auto& [why, n] : c.not_copied)
    report_.snapshots_not_copied[jump::bound_name(why)] += n;
  report_.snapshot_unwind_s += c.unwind_s;
  report_.snapshots_needed.resize(kNeededBuckets);
  for (std::size_t i = 0; i < kNeededBuckets; ++i) report_.snapshots_needed[i] += c.needed[i];
  if (const jump::CallReader* reader = tr.jumps ? tr.jumps->stack_reader() : nullptr)
    report_.snapshots_lost += reader->lost_total();
  if (!tr.stack_feed->error().empty() && opts_.announce)
    notes_ << opts_.tool << ": the stack snapshots of process " << tr.proc->pid()
           << " stopped being read: " << tr.stack_feed->error() << std::endl;
  tr.stack_feed.reset();
}

// Each distinct stack of the entries, named as `trace` names its stacks, outermost first; one
// the copy cut short ends (at its outer end) in a frame that says so.
void TraceRun::name_entry_stacks(ProcessTrace& tr, EntryStacks& entries) {
  entries.flush();
  std::vector<std::vector<std::string>> names;
  for (const auto& d : entries.distinct()) {
    if (tr.symbols) tr.book.name_frames(*tr.symbols, d.ips);
    std::vector<std::string> frames;
    if (d.truncated)
      frames.push_back("[cut short: --stack-size " + std::to_string(opts_.calls->stack_bytes) +
                       "]");
    for (std::size_t i = d.ips.size(); i-- > 0;) frames.push_back(tr.book.frame_name(d.ips, i));
    names.push_back(std::move(frames));
  }
  entries.set_names(std::move(names));
  if (!entries.spool().error().empty()) spool_errors_.push_back(entries.spool().error());
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
