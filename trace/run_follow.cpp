// Following the processes of a trace: a fork child gets a step-over of its own over its copy
// of the probes; an exec'd process gets its new image probed (or, with --no-follow-exec, the
// trace ends or lets it go).
#include "common/error.hpp"
#include "trace/run.hpp"
#include "tracer/os/proc_files.hpp"

namespace probecost::trace_run {

void TraceRun::start_session(ProcessTrace& tr) {
  if (opts_.stacks && !tr.book.collector) {
    tr.book.collector.emplace(opts_.stack_depth);
    tr.book.stack_depth = opts_.stack_depth;
    if (opts_.stack_size) tr.book.snapshot_bytes = opts_.stack_size;
  }
  tr.session = std::make_unique<Session>(*tr.proc, *tr.step_over);
  ProcessTrace* t = &tr;
  tr.proc->set_new_thread_observer([t](pid_t tid, std::uint64_t fs_base) {
    if (t->feed) t->feed->thread_appeared(tid, fs_base);
  });
  tr.proc->set_thread_exit_observer([t](pid_t tid) {
    if (t->feed) t->feed->thread_exiting(tid);
    if (t->jumps) t->jumps->forget_thread(tid);  // its stack bounds' entry, for the next thread
  });
  tr.session->set_hit_observer([this, t](pid_t tid, StoppedThread& thread, BreakpointSite& site) {
    if (t->feed) t->feed->on_int3(tid, site.address(), thread.regs(), t->proc->memory());
    if (++t->book.thread_hits[tid] == 1) {
      t->book.thread_names[tid] = thread_name(t->proc->pid(), tid);
      // A process that shares this one's memory (a vfork child before its exec, a
      // clone(CLONE_VM) child) hits the same int3: its hits are its own process's.
      pid_t tgid = tgid_of(tid);
      if (tgid && tgid != t->proc->pid()) t->book.sharer_of[tid] = tgid;
    }
    ++t->book.threads_by_site[site.address().value()][tid];
    if (opts_.usdt_args) {
      auto spec = t->book.usdt_specs.find(site.address().value());
      if (spec != t->book.usdt_specs.end()) {
        ++t->book.usdt_args[spec->first]
                           [usdt_args_text(spec->second, thread.regs(), t->proc->memory())];
      }
    }
    if (t->book.collector) {
      if (!t->symbols) t->symbols = std::make_unique<ProcessSymbols>(t->proc->proc_tid());
      t->book.record_stack(*t->symbols, t->proc->pid(), tid, thread, site);
    }
  });
  hook_link_map(tr);
}

namespace {

std::string described(ProcessTrace& tr) {
  std::size_t threads = tr.proc->threads().thread_count(), probes = tr.probes.size();
  return std::to_string(tr.proc->pid()) + " (" + std::to_string(threads) +
         (threads == 1 ? " thread, " : " threads, ") + std::to_string(probes) +
         (probes == 1 ? " probe)" : " probes)");
}

}  // namespace

// The second and later -p: each attached, probed and let run in turn, while the ones before
// run on. One that cannot be traced (gone meanwhile, not ours) is said and left out. The user
// is told once all are in.
void TraceRun::attach_others() {
  if (opts_.more_pids.empty()) return;
  std::string traced = described(*processes_.front());
  for (pid_t pid : opts_.more_pids) {
    if (stop_requested()) return;
    TracedProcess* p = nullptr;
    try {
      p = &family_->attach_another(pid, true);
    } catch (const Error& e) {
      notes_ << opts_.tool << ": not tracing process " << pid << ": " << e.what() << std::endl;
      continue;
    }
    ProcessTrace& tr = add_process(*p);
    p->unless_gone([&] { install_image(tr); });
    if (!tr.step_over) tr.step_over = std::make_unique<SingleStepOver>();
    start_session(tr);
    traced += ", " + described(tr);
    let_run(tr);
  }
  if (opts_.announce) {
    notes_ << opts_.tool << ": tracing processes " << traced << "; Ctrl-C to stop" << std::endl;
  }
}

// The process runs again: how long it was held, and where that went, go into the report.
void TraceRun::let_run(ProcessTrace& tr) {
  tr.session->start();
  PhaseClock& held = tr.proc->held();
  held.stop("resuming the threads");
  for (const Phase& phase : held.phases()) {
    add_phase(report_.held_phases, phase);
    report_.held_s += phase.wall_s;
  }
  held = PhaseClock();
}

// A fork child holds a copy of its parent's probes (TracedProcess::take_over_fork made them all
// int3 sites): it gets a step-over of its own, over its own memory.
void TraceRun::take_fork_child(ProcessTrace& tr, ProcessTrace& parent) {
  TracedProcess& p = *tr.proc;
  tr.images.push_back(parent.images.empty() ? std::string() : parent.images.back());
  tr.probes = parent.probes;
  tr.pending = parent.pending;
  tr.link_map = parent.link_map;  // the same dynamic linker, its r_brk site copied
  for (const auto& pl : parent.installs) {
    ProbeInstall mine;
    mine.why_not_jump =
        pl.jump ? "a fork child: the parent's jump is an int3 in its copy" : pl.why_not_jump;
    tr.installs.push_back(mine);
  }
  tr.step_over = make_step_over(
      opts_.step_over, p.memory(), [&p](RuntimeAddr near) { return p.map_scratch(near); },
      &p.space().relocated());
  for (const auto& site : p.space().sites()) {
    if (site->enabled()) tr.step_over->prepare(*site);
  }
}

// Processes that became members of the family since the last look: a fork child, or a vfork
// child that exec'd. Each is stopped until it is set up here.
void TraceRun::take_new_processes() {
  for (TracedProcess* p : family_->take_new_members()) {
    ProcessTrace& tr = add_process(*p);
    ProcessTrace* parent = find_process(family_->parent_of(*p));
    // Outcome::Gone when it was killed while we set it up: its end is reported by the wait,
    // and its session, as that of a process with nothing probed, has no site to step over.
    p->unless_gone([&] {
      if (p->exec_ended()) {
        follow_exec(tr);
      } else if (p->alive()) {
        take_fork_child(tr, *parent);
      }
    });
    if (!tr.step_over) tr.step_over = std::make_unique<SingleStepOver>();
    start_session(tr);
    let_run(tr);
  }
}

// A process of ours exec'd: its old image's probes went with its address space. Its new image
// is probed, or, with --no-follow-exec, the trace ends (the root) or lets it go (a child).
// False when the whole trace is to end.
bool TraceRun::follow_execs() {
  for (std::size_t i = 0; i < processes_.size(); ++i) {
    ProcessTrace& tr = *processes_[i];
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
    hook_link_map(tr);
    let_run(tr);
  }
  return true;
}

void TraceRun::follow_exec(ProcessTrace& tr) {
  TracedProcess& p = *tr.proc;
  p.resume_after_exec();
  p.held().start();  // the new image's probes going in, every thread stopped
  install_image(tr);
  if (!opts_.announce) return;
  notes_ << opts_.tool << ": process " << p.pid();
  if (TracedProcess* parent = family_->parent_of(p)) {
    notes_ << " (child of " << parent->pid() << ")";
  }
  notes_ << " exec'd " << tr.images.back() << ": " << tr.probes.size()
         << (tr.probes.size() == 1 ? " probe" : " probes") << " in the new image" << std::endl;
}

}  // namespace probecost::trace_run
