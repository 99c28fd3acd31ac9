// What a run of `probecost trace` found: each image's probes closed into ProbeReports, a
// ProcessReport per process, and the CPU figures per hit.
#include <algorithm>

#include "trace/run.hpp"

namespace probecost::trace_run {

// A process's current image's results, once its probes are out (or its address space is
// gone): jump counts and rings are final then.
void TraceRun::close_image(ProcessTrace& tr) {
  drain_calls(tr, true);
  finish_stack_feed(tr);
  std::string image = tr.images.empty() ? std::string() : tr.images.back();
  if (std::find(report_.images.begin(), report_.images.end(), image) == report_.images.end()) {
    report_.images.push_back(image);
  }
  for (std::size_t i = 0; i < std::min(tr.probes.size(), tr.installs.size()); ++i) {
    report_.probes.push_back(probe_row(tr, i, image));
  }
  report_.jump_hits += jump_hits(tr);  // int3 hits come from the sessions' counts
  for (auto& [tid, n] : tr.book.thread_hits) report_.thread_hits[tid] += n;
  for (auto& [tid, name] : tr.book.thread_names) report_.thread_names.emplace(tid, name);
  tr.book.forget_image();
  tr.probes.clear();
  tr.installs.clear();
  if (tr.jumps) tr.jumps.reset();
}

// Probe i of the process's current image as a row (its sharers' hits in rows of their own).
ProbeReport TraceRun::probe_row(ProcessTrace& tr, std::size_t i, const std::string& image) {
  ProbeReport pr;
  pr.pid = tr.proc->pid();
  pr.probe = tr.probes[i];
  pr.image = image;
  pr.why_not_jump = tr.installs[i].why_not_jump;
  if (auto j = tr.installs[i].jump) {
    pr.via = Via::Jump;
    if (tr.jumps->events()) tr.jumps->drain(*j, true);
    pr.hits = tr.jumps->hits(*j);
    pr.events_read = tr.jumps->records_read(*j);
    pr.events_lost = tr.jumps->records_lost(*j);
    pr.step_over = "jump over " + std::to_string(tr.jumps->patched_length(*j)) + " bytes";
    pr.stacks = tr.book.top_stacks(tr.probes[i].address.value());
  } else {
    pr.via = Via::Int3;
    BreakpointSite* site = tr.proc->space().sites().find(tr.probes[i].address);
    pr.hits = site ? site->hits : 0;
    pr.step_over = site ? tr.step_over->describe(*site) : "";
    if (site) pr.method = tr.step_over->method(*site);
    pr.threads = tr.book.threads_by_site[tr.probes[i].address.value()];
    pr.stacks = tr.book.top_stacks(tr.probes[i].address.value());
    if (auto a = tr.book.usdt_args.find(tr.probes[i].address.value());
        a != tr.book.usdt_args.end()) {
      pr.usdt_args.assign(a->second.begin(), a->second.end());
      std::stable_sort(pr.usdt_args.begin(), pr.usdt_args.end(),
                       [](const auto& x, const auto& y) { return x.second > y.second; });
    }
    split_sharers(tr, pr);
  }
  return pr;
}

// A probe whose library was dlclose'd and dlopen'd again has a row per load: one row, the
// hits of every load added.
void TraceRun::merge_loads() {
  auto& rows = report_.probes;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::size_t k = i + 1; k < rows.size();) {
      ProbeReport& a = rows[i];
      const ProbeReport& b = rows[k];
      if (!a.unloaded || a.pid != b.pid || a.image != b.image || a.probe.spec != b.probe.spec) {
        ++k;
        continue;
      }
      a.hits += b.hits;
      for (const auto& [tid, n] : b.threads) a.threads[tid] += n;
      a.loads += b.loads;
      a.unloaded = b.unloaded;
      a.probe = b.probe;  // where it was last
      a.via = b.via;
      a.step_over = b.step_over;
      a.method = b.method;
      rows.erase(rows.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
}

// The hits of threads of other processes that share this one's memory go to rows of their
// own: one per process, as if it had its own copy of the probe.
void TraceRun::split_sharers(ProcessTrace& tr, ProbeReport& pr) {
  std::map<pid_t, ProbeReport> theirs;
  for (auto it = pr.threads.begin(); it != pr.threads.end();) {
    auto sharer = tr.book.sharer_of.find(it->first);
    if (sharer == tr.book.sharer_of.end()) {
      ++it;
      continue;
    }
    ProbeReport& row = theirs.try_emplace(sharer->second, pr).first->second;
    if (row.pid != sharer->second) {
      row.pid = sharer->second;
      row.hits = 0;
      row.threads.clear();
      row.stacks.clear();
    }
    row.hits += it->second;
    row.threads[it->first] = it->second;
    pr.hits -= it->second;
    it = pr.threads.erase(it);
  }
  for (auto& [pid, row] : theirs) {
    report_.probes.push_back(row);
    sharers_[pid] = tr.proc->pid();
  }
}

// Once every process is let go: each one's last image closed, and its report.
void TraceRun::report_processes() {
  for (auto& tr : processes_) {
    close_image(*tr);
    report_.int3_hits += tr->session ? tr->session->stats().hits : 0;
    ProcessReport pr;
    pr.pid = tr->proc->pid();
    if (TracedProcess* parent = family_->parent_of(*tr->proc)) pr.parent = parent->pid();
    pr.images = tr->images;
    pr.end = tr->proc->end() ? tr->proc->end()->describe() : "let go";
    report_.processes.push_back(pr);
  }
  merge_loads();
  for (const auto& [pid, parent] : sharers_) {
    bool member = std::any_of(report_.processes.begin(), report_.processes.end(),
                              [pid = pid](const ProcessReport& pr) { return pr.pid == pid; });
    if (member) continue;
    ProcessReport pr;
    pr.pid = pid;
    pr.parent = parent;
    pr.end = "shared the memory of process " + std::to_string(parent) + " (never exec'd)";
    report_.processes.push_back(pr);
  }
  report_.hits = report_.int3_hits + report_.jump_hits;
  for (const auto& probe : report_.probes) {
    for (auto& pr : report_.processes) {
      if (pr.pid == probe.pid) pr.hits += probe.hits;
    }
  }
  for (const auto& spec : opts_.probes) {
    if (!probed_specs_.count(spec)) report_.never_probed.push_back(spec);
  }
}

// The figures per hit, from the hits counted and `syscalls`, the tracer's system calls.
void TraceRun::report_figures(std::uint64_t syscalls) {
  const ProcessTrace& top = *processes_.front();
  double children_cpu = 0;
  for (std::size_t i = 1; i < processes_.size(); ++i) {
    children_cpu += std::max(0.0, processes_[i]->cpu_last - processes_[i]->cpu0);
  }
  auto per = [](double x, std::uint64_t hits) { return hits ? x / static_cast<double>(hits) : 0; };
  report_.syscalls_per_int3_hit = per(static_cast<double>(syscalls), report_.int3_hits);
  // A launched command's CPU (from our RUSAGE_CHILDREN once it is reaped) includes the
  // children it waited for; an attached process's does not.
  report_.tracee_cpu_s =
      std::max(0.0, top.cpu_last - top.cpu0) + (report_.launched ? 0 : children_cpu);
  double int3_s = std::max(0.0, report_.tracer_cpu_s - report_.events_cpu_s);
  report_.tracer_cpu_ns_per_int3_hit = per(int3_s * 1e9, report_.int3_hits);
  report_.tracer_cpu_ns_per_jump_hit = per(report_.events_cpu_s * 1e9, report_.jump_hits);
  report_.cpu_ns_per_hit = per((report_.tracer_cpu_s + report_.tracee_cpu_s) * 1e9, report_.hits);
  double stack_s = 0;
  std::uint64_t ptrace = 0, checked = 0, differed = 0;
  for (auto& tr : processes_) {
    stack_s += tr->book.stack_seconds;
    ptrace += tr->book.ptrace_unwinds, checked += tr->book.checked, differed += tr->book.differed;
  }
  report_.stack_ns_per_hit = per(stack_s * 1e9, report_.int3_hits);
  if (opts_.announce && report_.stacks && report_.int3_hits)
    notes_ << opts_.tool << ": stacks of int3 hits: " << report_.int3_hits - ptrace
           << " from a copy of the stack, " << ptrace << " over ptrace (the copy could not "
           << "give the whole stack)"
           << (checked ? ", " + std::to_string(checked) + " unwound both ways, " +
                             std::to_string(differed) + " differed"
                       : std::string())
           << std::endl;
}

}  // namespace probecost::trace_run
