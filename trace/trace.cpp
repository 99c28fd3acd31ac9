#include "trace/trace.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <ctime>
#include <optional>

#include "common/error.hpp"
#include "trace/run.hpp"
#include "tracer/proc_files.hpp"
#include "tracer/syscalls.hpp"

namespace probecost {

namespace trace_run {

namespace {

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::string describe_end(Session::End end, const TracedProcess& proc) {
  switch (end) {
    case Session::End::ProcessEnded:
      return "the process " + (proc.end() ? proc.end()->describe() : std::string("ended"));
    case Session::End::Exec:
      return "the process called exec";
    case Session::End::Interrupted:
      return "probecost was interrupted";
    case Session::End::Tick:
    case Session::End::Deadline:
      return "--duration reached";
    case Session::End::Predicate:
      break;
  }
  return "stopped";
}

// After we let go of a launched command: by default it runs to its end, untraced, and we wait
// for it, as a wrapper does (its status becomes ours). Stop signals that reach us meanwhile
// are not the command's: only a second one (a user insisting) makes us stop waiting, and the
// command runs on by itself. Reports of tasks we still trace are taken meanwhile: the command
// may be waiting to reap one (a fork child that exited while we let go).
std::optional<int> wait_for_command(pid_t pid, const std::vector<pid_t>& leftovers) {
  return release_leftovers(leftovers, pid, true);
}

}  // namespace

std::unique_ptr<TracedProcess> TraceRun::start_target(const TraceOptions& opts) {
  if (opts.pid) return TracedProcess::attach(opts.pid);
  LaunchSpec spec;
  spec.argv = opts.command;
  spec.stdin_fd = opts.stdin_fd;
  spec.stdout_fd = opts.stdout_fd;
  spec.stderr_fd = opts.stderr_fd;
  spec.cpu = opts.cpu;
  auto proc = TracedProcess::launch(spec);
  // Stopped at its exec, only the executable and the dynamic loader are mapped: run to the
  // entry point so that the libraries it needs at start-up are there to be probed.
  proc->run_to_entry();
  return proc;
}

Traced& TraceRun::add_traced(TracedProcess& proc) {
  traced_.push_back(std::make_unique<Traced>());
  Traced& tr = *traced_.back();
  tr.proc = &proc;
  tr.cpu0 = tr.cpu_last = proc.cpu_seconds();
  return tr;
}

Traced* TraceRun::traced(const TracedProcess* proc) {
  for (auto& tr : traced_) {
    if (tr->proc == proc) return tr.get();
  }
  return nullptr;
}

std::uint64_t TraceRun::jump_hits(const Traced& tr) const {
  std::uint64_t n = 0;
  for (std::size_t i = 0; tr.jumps && i < tr.jumps->size(); ++i) n += tr.jumps->hits(i);
  return n;
}

std::uint64_t TraceRun::hits_so_far() const {
  std::uint64_t n = report_.hits;  // closed images' jump hits
  for (const auto& tr : traced_) {
    n += jump_hits(*tr) + (tr->session ? tr->session->stats().hits : 0);
  }
  return n;
}

void TraceRun::start_session(Traced& tr) {
  if (opts_.stacks && !tr.rec.collector) tr.rec.collector.emplace(opts_.stack_depth);
  tr.session = std::make_unique<Session>(*tr.proc, *tr.step_over);
  Traced* t = &tr;
  tr.session->set_hit_observer([this, t](pid_t tid, StoppedThread& thread, BreakpointSite& site) {
    if (++t->rec.thread_hits[tid] == 1) {
      t->rec.thread_names[tid] = thread_name(t->proc->pid(), tid);
      // A process that shares this one's memory (a vfork child before its exec, a
      // clone(CLONE_VM) child) hits the same int3: its hits are its own process's.
      pid_t tgid = tgid_of(tid);
      if (tgid && tgid != t->proc->pid()) t->rec.sharer_of[tid] = tgid;
    }
    ++t->rec.threads_by_site[site.address().value()][tid];
    if (t->rec.collector) {
      if (!t->symbols) t->symbols = std::make_unique<ProcessSymbols>(t->proc->proc_tid());
      t->rec.record_stack(*t->symbols, tid, thread, site);
    }
  });
}

// A fork child holds a copy of its parent's probes (TracedProcess::follow_fork made them all
// int3 sites): it gets a step-over of its own, over its own memory.
void TraceRun::take_fork_child(Traced& tr, Traced& parent) {
  TracedProcess& p = *tr.proc;
  tr.images.push_back(parent.images.empty() ? std::string() : parent.images.back());
  tr.probes = parent.probes;
  for (const auto& pl : parent.placements) {
    Placement mine;
    mine.why_not_jump =
        pl.jump ? "a fork child: the parent's jump is an int3 in its copy" : pl.why_not_jump;
    tr.placements.push_back(mine);
  }
  tr.step_over = make_step_over(
      opts_.step_over, p.memory(), [&p](RuntimeAddr near) { return p.map_scratch(near); },
      &p.relocated());
  for (const auto& site : p.sites()) {
    if (site->enabled()) tr.step_over->prepare(*site);
  }
}

// Processes that became members of the family since the last look: a fork child, or a vfork
// child that exec'd. Each is stopped until it is set up here.
void TraceRun::take_new_processes() {
  for (TracedProcess* p : family_.take_new_members()) {
    Traced& tr = add_traced(*p);
    Traced* parent = traced(family_.parent_of(*p));
    try {
      if (p->exec_ended()) {
        follow_exec(tr);
      } else if (p->alive()) {
        take_fork_child(tr, *parent);
      }
    } catch (const Error&) {
      // It was killed while we set it up: its end is reported by the wait.
      if (!p->dying()) throw;
    }
    if (!tr.step_over) tr.step_over = std::make_unique<SingleStepOver>();
    start_session(tr);
    tr.session->start();
  }
}

// A process of ours exec'd: its old image's probes went with its address space. Its new image
// is probed, or, with --no-follow-exec, the trace ends (the root) or lets it go (a child).
// False when the whole trace is to end.
bool TraceRun::follow_execs() {
  for (std::size_t i = 0; i < traced_.size(); ++i) {
    Traced& tr = *traced_[i];
    if (!tr.proc->exec_ended() || !tr.session) continue;
    if (!opts_.follow_exec) {
      if (i == 0) return false;
      close_image(tr);
      tr.proc->detach();
      continue;
    }
    close_image(tr);
    follow_exec(tr);
    tr.session->set_step_over(*tr.step_over);
    tr.session->start();
  }
  return true;
}

void TraceRun::follow_exec(Traced& tr) {
  TracedProcess& p = *tr.proc;
  p.resume_after_exec();
  double held_from = now_s();  // the new image's probes going in, every thread stopped
  install_image(tr);
  report_.held_s += now_s() - held_from;
  if (!opts_.announce) return;
  notes_ << "probecost trace: process " << p.pid();
  if (TracedProcess* parent = family_.parent_of(p)) notes_ << " (child of " << parent->pid() << ")";
  notes_ << " exec'd " << tr.images.back() << ": " << tr.probes.size()
         << (tr.probes.size() == 1 ? " probe" : " probes") << " in the new image" << std::endl;
}

void TraceRun::on_tick() {
  double t = now_s();
  for (auto& tr : traced_) {
    if (tr->proc->alive()) tr->cpu_last = tr->proc->cpu_seconds();
    for (std::size_t i = 0; tr->jumps && tr->jumps->events() && i < tr->jumps->size(); ++i) {
      tr->jumps->drain(i);
    }
  }
  if (opts_.on_tick && root().alive()) opts_.on_tick(root().pid());
  if (opts_.progress && t >= next_progress_) {
    next_progress_ += 1;
    std::uint64_t hits = hits_so_far();
    notes_ << "\r\033[K[" << static_cast<int>(t - t0_) << "s] " << hits << " hits ("
           << static_cast<std::uint64_t>(hits / (t - t0_)) << "/s)" << std::flush;
  }
}

// The event loop over every process of the trace: each event goes to its process's session.
Session::End TraceRun::loop() {
  bool armed = false;
  double deadline = opts_.duration_s > 0 ? t0_ + opts_.duration_s : 0;
  for (;;) {
    if (stop_requested()) return Session::End::Interrupted;
    if (deadline_reached(deadline, armed)) return Session::End::Deadline;
    if (tick_requested().exchange(false)) on_tick();
    take_new_processes();
    if (!follow_execs()) return Session::End::Exec;
    if (!family_.any_alive()) return Session::End::ProcessEnded;
    auto ev = family_.next_event();
    if (!ev) {
      if (errno == ECHILD) return Session::End::ProcessEnded;
      continue;  // a signal: the flags are looked at above
    }
    Traced* tr = traced(ev->first);
    if (!tr) {
      take_new_processes();  // made while waiting (a vfork child's exec)
      tr = traced(ev->first);
    }
    if (tr && tr->session) tr->session->handle(ev->second);
  }
}

// A process's current image's results, once its probes are out (or its address space is
// gone): jump counts and rings are final then.
void TraceRun::close_image(Traced& tr) {
  std::string image = tr.images.empty() ? std::string() : tr.images.back();
  if (std::find(report_.images.begin(), report_.images.end(), image) == report_.images.end()) {
    report_.images.push_back(image);
  }
  for (std::size_t i = 0; i < std::min(tr.probes.size(), tr.placements.size()); ++i) {
    ProbeReport pr;
    pr.pid = tr.proc->pid();
    pr.probe = tr.probes[i];
    pr.image = image;
    pr.why_not_jump = tr.placements[i].why_not_jump;
    if (auto j = tr.placements[i].jump) {
      pr.via = "jump";
      if (tr.jumps->events()) tr.jumps->drain(*j, true);
      pr.hits = tr.jumps->hits(*j);
      pr.events_read = tr.jumps->records_read(*j);
      pr.events_lost = tr.jumps->records_lost(*j);
      pr.step_over = "jump over " + std::to_string(tr.jumps->patched_length(*j)) + " bytes";
    } else {
      pr.via = "int3";
      BreakpointSite* site = tr.proc->sites().find(tr.probes[i].address);
      pr.hits = site ? site->hits : 0;
      pr.step_over = site ? tr.step_over->describe(*site) : "";
      pr.threads = tr.rec.threads_by_site[tr.probes[i].address.value()];
      pr.stacks = tr.rec.top_stacks(tr.probes[i].address.value());
      split_sharers(tr, pr);
    }
    report_.probes.push_back(pr);
  }
  report_.hits += jump_hits(tr);  // int3 hits come from the sessions' counts, over every image
  for (auto& [tid, n] : tr.rec.thread_hits) report_.thread_hits[tid] += n;
  for (auto& [tid, name] : tr.rec.thread_names) report_.thread_names.emplace(tid, name);
  tr.rec.forget_image();
  tr.probes.clear();
  tr.placements.clear();
  if (tr.jumps) tr.jumps.reset();
}

// The hits of threads of other processes that share this one's memory go to rows of their
// own: one per process, as if it had its own copy of the probe.
void TraceRun::split_sharers(Traced& tr, ProbeReport& pr) {
  std::map<pid_t, ProbeReport> theirs;
  for (auto it = pr.threads.begin(); it != pr.threads.end();) {
    auto sharer = tr.rec.sharer_of.find(it->first);
    if (sharer == tr.rec.sharer_of.end()) {
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

std::vector<pid_t> TraceRun::leftovers() const {
  std::vector<pid_t> tids;
  for (const auto& m : family_.members()) {
    tids.insert(tids.end(), m->leftovers().begin(), m->leftovers().end());
  }
  return tids;
}

// Every way out: every process is left as it was (or, asked for, killed). The fork children
// first: the root's detach must not wait behind them.
void TraceRun::let_go() {
  family_.set_following(false);  // a fork seen from now on is cleaned and let go
  for (std::size_t i = traced_.size(); i-- > 1;) {
    TracedProcess& p = *traced_[i]->proc;
    if (p.alive()) traced_[i]->cpu_last = p.cpu_seconds();
    if (opts_.kill_on_exit && root().launched()) {
      p.kill();
    } else {
      p.detach();
    }
  }
  // Members made while letting go (a fork just before) are let go too.
  for (TracedProcess* p : family_.take_new_members()) p->detach();
  TracedProcess& p = root();
  Traced& tr = *traced_.front();
  if (p.alive()) tr.cpu_last = p.cpu_seconds();
  if (p.launched() && !p.end()) {
    if (opts_.kill_on_exit) {
      // Killed on request: its status is ours, not the command's (probecost exits 0).
      p.kill();
      report_.command_end = "killed by probecost (--kill-on-exit)";
    } else {
      p.detach();
      // It may have ended while we let go of it (reaped by the detach's waits).
      report_.command_status =
          p.end() ? std::optional<int>(p.end()->raw()) : wait_for_command(p.pid(), leftovers());
      report_.command_end = report_.command_status
                                ? WaitStatus(*report_.command_status).describe()
                                : "still running (probecost stopped waiting for it)";
    }
  } else if (p.launched()) {
    report_.command_end = p.end()->describe();
    report_.command_status = p.end()->raw();
    tr.cpu_last = p.cpu_seconds();
  } else {
    p.detach();
    release_leftovers(leftovers(), 0, false);
  }
}

TraceReport TraceRun::run() {
  TracedProcess& p = root();
  Traced& top = add_traced(p);
  report_.pid = p.pid();
  report_.launched = p.launched();
  report_.stacks = opts_.stacks;
  report_.follow_forks = opts_.follow_forks;
  if (!p.launched()) p.start_guardian();
  // Interrupted while starting: nothing goes in, and the process is let go as it is.
  if (stop_requested()) {
    top.step_over = std::make_unique<SingleStepOver>();  // no site: never used
  } else {
    try {
      install_image(top);
    } catch (const Error&) {
      // A write or an injected system call that failed because the process is exiting under
      // us: there is nothing to probe; the session reports its end.
      if (!p.dying()) throw;
      if (!top.step_over) top.step_over = std::make_unique<SingleStepOver>();
    }
  }
  start_session(top);
  if (opts_.announce) {
    notes_ << "probecost trace: tracing process " << p.pid() << " (" << p.thread_count()
           << (p.thread_count() == 1 ? " thread" : " threads") << ") at " << top.probes.size()
           << (top.probes.size() == 1 ? " probe" : " probes")
           << (opts_.follow_forks ? ", following forks" : "") << "; Ctrl-C to stop" << std::endl;
  }
  family_.set_following(opts_.follow_forks);
  t0_ = now_s();
  report_.held_s = t0_ - held_from_;
  double cpu0 = thread_cpu_s();
  top.cpu0 = top.cpu_last = p.cpu_seconds();
  next_progress_ = t0_ + 1;
  std::uint64_t syscalls0 = sys::counters().total();
  top.session->start();
  Session::End end = loop();
  report_.tracer_cpu_s = thread_cpu_s() - cpu0;
  if (opts_.progress) notes_ << "\r\033[K" << std::flush;
  report_.duration_s = now_s() - t0_;
  report_.ending = describe_end(end, p);
  std::uint64_t syscalls = sys::counters().total() - syscalls0;
  let_go();
  double children_cpu = 0;
  for (auto& tr : traced_) {
    close_image(*tr);
    report_.hits += tr->session ? tr->session->stats().hits : 0;
    if (tr.get() != &top) children_cpu += std::max(0.0, tr->cpu_last - tr->cpu0);
    ProcessReport pr;
    pr.pid = tr->proc->pid();
    if (TracedProcess* parent = family_.parent_of(*tr->proc)) pr.parent = parent->pid();
    pr.images = tr->images;
    pr.end = tr->proc->end() ? tr->proc->end()->describe() : "let go";
    report_.processes.push_back(pr);
  }
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
  for (const auto& probe : report_.probes) {
    for (auto& pr : report_.processes) {
      if (pr.pid == probe.pid) pr.hits += probe.hits;
    }
  }
  for (const auto& spec : opts_.probes) {
    if (!probed_specs_.count(spec)) report_.never_probed.push_back(spec);
  }
  report_.syscalls_per_hit = report_.hits ? static_cast<double>(syscalls) / report_.hits : 0;
  // A launched command's CPU (from our RUSAGE_CHILDREN once it is reaped) includes the
  // children it waited for; an attached process's does not.
  report_.tracee_cpu_s = std::max(0.0, top.cpu_last - top.cpu0) + (p.launched() ? 0 : children_cpu);
  if (report_.hits) {
    report_.tracer_cpu_ns_per_hit = report_.tracer_cpu_s * 1e9 / report_.hits;
    report_.cpu_ns_per_hit = (report_.tracer_cpu_s + report_.tracee_cpu_s) * 1e9 / report_.hits;
  }
  double stack_s = 0;
  for (auto& tr : traced_) stack_s += tr->rec.stack_seconds;
  report_.stack_ns_per_hit = report_.hits ? stack_s * 1e9 / report_.hits : 0;
  return report_;
}

}  // namespace trace_run

using trace_run::TraceRun;

void check_via(const std::string& via) {
  if (via != "int3" && via != "jump" && via != "auto") {
    throw UsageError("unknown --via '" + via + "' (int3, jump or auto)");
  }
}

std::vector<Symbol> list_target_symbols(const TraceOptions& opts, const std::string& pattern) {
  auto proc = TraceRun::start_target(opts);
  return ProcessSymbols(proc->proc_tid()).list(pattern);
}

TraceReport run_trace(const TraceOptions& opts, std::ostream& notes) {
  check_via(opts.via);
  if (opts.stacks && opts.via == "jump") {
    throw UsageError(
        "--stacks needs int3 probes: a jump probe never stops the thread to unwind it "
        "(use --via int3, or auto, which uses int3 with --stacks)");
  }
  if (opts.events && opts.via == "int3") {
    throw UsageError("--events needs jump probes (--via jump or auto)");
  }
  return TraceRun(opts, notes).run();
}

}  // namespace probecost