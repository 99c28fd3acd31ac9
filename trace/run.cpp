#include "trace/run.hpp"

#include <fnmatch.h>

#include <optional>
#include <sstream>

#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/status_line.hpp"
#include "trace/trace.hpp"
#include "tracer/core/cannot_trace.hpp"
#include "tracer/jump/module_code.hpp"
#include "tracer/os/fault_plan.hpp"
#include "tracer/os/syscalls.hpp"
#include "tracer/symbols/cannot_probe.hpp"

namespace probecost {

namespace trace_run {

namespace {

std::string describe_end(RunEnd end, const TracedProcess& proc) {
  switch (end) {
    case RunEnd::ProcessEnded:
      return "the process " + (proc.end() ? proc.end()->describe() : std::string("ended"));
    case RunEnd::Exec:
      return "the process called exec";
    case RunEnd::Interrupted:
      return "probecost was interrupted";
    case RunEnd::Tick:
    case RunEnd::Deadline:
      return "--duration reached";
    case RunEnd::Predicate:
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

std::unique_ptr<Family> TraceRun::start_target(const TraceOptions& opts) {
  if (opts.pid) return Family::attach(opts.pid, true);
  LaunchSpec spec;
  spec.argv = opts.command;
  spec.stdin_fd = opts.stdin_fd;
  spec.stdout_fd = opts.stdout_fd;
  spec.stderr_fd = opts.stderr_fd;
  spec.cpu = opts.cpu;
  auto family = Family::launch(spec);
  // Stopped at its exec, only the executable and the dynamic loader are mapped: run to the
  // entry point so that the libraries it needs at start-up are there to be probed.
  family->root().run_to_entry();
  return family;
}

ProcessTrace& TraceRun::add_process(TracedProcess& proc) {
  processes_.push_back(std::make_unique<ProcessTrace>());
  ProcessTrace& tr = *processes_.back();
  tr.proc = &proc;
  tr.cpu0 = tr.cpu_last = proc.cpu_seconds();
  return tr;
}

ProcessTrace* TraceRun::find_process(const TracedProcess* proc) {
  for (auto& tr : processes_) {
    if (tr->proc == proc) return tr.get();
  }
  return nullptr;
}

std::uint64_t TraceRun::jump_hits(const ProcessTrace& tr) const {
  std::uint64_t n = 0;
  for (std::size_t i = 0; tr.jumps && i < tr.jumps->size(); ++i) n += tr.jumps->hits(i);
  return n;
}

// With --stacks, the tracer's unwinding so far per int3 hit, in whole microseconds.
long TraceRun::stack_us_per_hit() const {
  double s = 0;
  std::uint64_t hits = 0;
  for (const auto& tr : processes_) {
    s += tr->book.stack_seconds;
    hits += tr->session ? tr->session->stats().hits : 0;
  }
  return hits ? static_cast<long>(s * 1e6 / static_cast<double>(hits) + 0.5) : 0;
}

std::uint64_t TraceRun::hits_so_far() const {
  std::uint64_t n = report_.jump_hits;  // closed images'
  for (const auto& tr : processes_) {
    n += jump_hits(*tr) + (tr->session ? tr->session->stats().hits : 0);
  }
  return n;
}

void TraceRun::on_tick() {
  for (auto& tr : processes_) {
    if (tr->proc->alive()) tr->cpu_last = tr->proc->cpu_seconds();
    if (tr->feed) tr->feed->sample_names();
    // A recording's call buffers have a drain of their own (call_drain.hpp).
    bool events = tr->jumps && tr->jumps->events();
    if (!events) continue;
    double drain0 = thread_cpu_s();
    for (std::size_t i = 0; events && i < tr->jumps->size(); ++i) tr->jumps->drain(i);
    report_.events_cpu_s += thread_cpu_s() - drain0;
  }
  if (opts_.on_tick && root().alive()) opts_.on_tick(root().pid());
  // The figures for the status line, which a thread of its own draws (progress_text): this
  // thread never waits for a terminal.
  if (opts_.progress) {
    live_hits_.store(hits_so_far(), std::memory_order_relaxed);
    if (opts_.stacks) live_stack_us_.store(stack_us_per_hit(), std::memory_order_relaxed);
  }
}

std::string TraceRun::progress_text(double t) const {
  std::uint64_t hits = live_hits_.load(std::memory_order_relaxed);
  std::ostringstream text;
  text << "[" << static_cast<int>(t) << "s] " << hits << " hits ("
       << static_cast<std::uint64_t>(static_cast<double>(hits) / t) << "/s)";
  if (opts_.stacks)
    text << ", " << live_stack_us_.load(std::memory_order_relaxed) << " us of probecost's a stack";
  return text.str();
}

Session* TraceRun::session_of(TracedProcess& proc) {
  ProcessTrace* tr = find_process(&proc);
  if (!tr) {
    take_new_processes();  // made while waiting (a vfork child's exec)
    tr = find_process(&proc);
  }
  return tr ? tr->session.get() : nullptr;
}

std::optional<RunEnd> TraceRun::between_events() {
  take_new_processes();
  if (!follow_execs()) return RunEnd::Exec;
  return std::nullopt;
}

// The event loop over every process of the trace: each event goes to its process's session.
RunEnd TraceRun::loop() {
  EventLoop loop(*family_, [this](TracedProcess& p) { return session_of(p); });
  if (opts_.duration_s > 0) loop.set_deadline(t0_ + opts_.duration_s);
  loop.set_on_tick([this] {
    on_tick();
    return false;
  });
  loop.set_between_events([this] { return between_events(); });
  return loop.run();
}

std::vector<pid_t> TraceRun::leftovers() const {
  std::vector<pid_t> tids;
  for (const auto& m : family_->members()) {
    tids.insert(tids.end(), m->leftovers().begin(), m->leftovers().end());
  }
  return tids;
}

// Every way out: every process is left as it was (or, asked for, killed). The fork children
// first: the root's detach must not wait behind them.
void TraceRun::let_go() {
  fault_plan::at_stage("detach");
  family_->set_following(false);  // a fork seen from now on is cleaned and let go
  for (std::size_t i = processes_.size(); i-- > 1;) {
    TracedProcess& p = *processes_[i]->proc;
    if (p.alive()) processes_[i]->cpu_last = p.cpu_seconds();
    if (opts_.kill_on_exit && root().launched()) {
      p.kill();
    } else {
      p.detach();
    }
  }
  // Members made while letting go (a fork just before) are let go too.
  for (TracedProcess* p : family_->take_new_members()) p->detach();
  TracedProcess& p = root();
  ProcessTrace& tr = *processes_.front();
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
  for (const auto& t : processes_) {
    for (const auto& what : t->proc->left_alone()) {
      notes_ << opts_.tool << ": left alone in process " << t->proc->pid() << ": " << what
             << std::endl;
    }
    for (const auto& what : t->proc->space().our_mappings().notes())
      notes_ << opts_.tool << ": in process " << t->proc->pid() << ", " << what << std::endl;
  }
}

namespace {

// What the user asked cannot be done (bad input, a process that cannot be traced, a probe that
// cannot go in), as against
// a failure of the run.
bool is_refusal(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const UsageError&) {
    return true;
  } catch (const CannotTrace&) {
    return true;
  } catch (const CannotProbe&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

// A runtime failure (a trace file that cannot be written, ...): every process is let go as on
// the normal way out, probes out, so that a launched command runs on, untraced, instead of
// dying with probecost (TracedProcess's destructor kills a launched command: right for one
// that never ran, after a usage error). We wait for it, as on the normal way out; the error
// follows. --kill-on-exit keeps its word: the destructors kill.
void TraceRun::let_go_after_failure() {
  if (opts_.kill_on_exit) return;
  try {
    family_->set_following(false);
    const auto& members = family_->members();
    for (std::size_t i = members.size(); i-- > 1;) members[i]->detach();
    for (TracedProcess* p : family_->take_new_members()) p->detach();
    TracedProcess& p = root();
    // Not when the normal way out has let it go and waited already (a failure after it).
    bool runs_on = p.launched() && !p.end() && p.alive() && report_.command_end.empty();
    p.detach();
    if (!runs_on || p.end()) return;
    notes_ << opts_.tool << ": stopping on the error below; the command (process " << p.pid()
           << ") is let go and runs on, untraced; waiting for it" << std::endl;
    wait_for_command(p.pid(), leftovers());
  } catch (const std::exception& e) {
    notes_ << opts_.tool << ": while letting go after the error below: " << e.what() << std::endl;
  }
}

// --stacks costs far more than counting: said before the trace starts, with what one unwind of
// a stopped thread takes here (after a first one has read the unwind tables, as every hit
// after the first finds them).
void TraceRun::announce_stacks(ProcessTrace& tr) {
  if (tr.stack_feed) {
    notes_ << opts_.tool << ": --stacks: each jump probe's hit copies its registers and up to "
           << opts_.stack_size
           << " bytes of its stack, unwound by probecost as it runs (no stop); an "
           << "int3 probe's hits are unwound over ptrace" << std::endl;
    return;
  }
  pid_t tid = tr.proc->proc_tid();
  tr.book.collector->capture(tid);
  double t0 = now_s();
  std::size_t frames = tr.book.collector->capture(tid).size();
  double unwind_s = now_s() - t0;
  notes_ << opts_.tool << ": --stacks: every hit stops the thread while probecost unwinds up to "
         << opts_.stack_depth << " frames, so every probe is an int3 (a jump never stops the "
         << "thread); besides the stop, an unwind of " << frames
         << (frames == 1 ? " frame" : " frames") << " (thread " << tid << " now) took "
         << static_cast<long>(unwind_s * 1e6 + 0.5)
         << " us here, a deeper stack longer; the progress line and the report say what a hit "
         << "costs" << std::endl;
}

// The root's probes in, its session ready, and the user told: every thread is still stopped.
ProcessTrace& TraceRun::begin() {
  TracedProcess& p = root();
  ProcessTrace& top = add_process(p);
  report_.pid = p.pid();
  report_.launched = p.launched();
  report_.stacks = opts_.stacks;
  report_.usdt_args = opts_.usdt_args;
  report_.follow_forks = opts_.follow_forks;
  // A launched command is held from its entry point on (an attached process from its stop).
  if (!p.held().running()) p.held().start();
  // Interrupted while starting: nothing goes in, and the process is let go as it is.
  if (stop_requested()) {
    top.step_over = std::make_unique<SingleStepOver>();  // no site: never used
  } else if (std::uint64_t files = ModuleCode::files_read(); p.unless_gone([&] {
               install_image(top);
               report_.modules_read_held = ModuleCode::files_read() - files;
             }) == Outcome::Gone) {
    // A write or an injected system call that failed because the process is exiting under
    // us: there is nothing to probe; the session reports its end.
    if (!top.step_over) top.step_over = std::make_unique<SingleStepOver>();
  }
  start_session(top);
  if (opts_.announce && opts_.stacks && !top.probes.empty()) announce_stacks(top);
  if (opts_.announce && opts_.more_pids.empty()) {
    notes_ << opts_.tool << ": tracing process " << p.pid() << " (" << p.threads().thread_count()
           << (p.threads().thread_count() == 1 ? " thread" : " threads") << ") at "
           << top.probes.size() << (top.probes.size() == 1 ? " probe" : " probes")
           << (opts_.follow_forks ? ", following forks" : "") << "; Ctrl-C to stop" << std::endl;
  }
  return top;
}

TraceReport TraceRun::run() {
  try {
    return run_to_end();
  } catch (...) {
    // A refusal found before the root ran: nothing touched, a launched command killed unrun.
    if (ran_ || !is_refusal(std::current_exception())) let_go_after_failure();
    throw;
  }
}

TraceReport TraceRun::run_to_end() {
  ProcessTrace& top = begin();
  family_->set_following(opts_.follow_forks);
  double cpu0 = thread_cpu_s();
  top.cpu0 = top.cpu_last = root().cpu_seconds();
  std::uint64_t syscalls0 = sys::counters().total();
  // The run's duration counts from before the resume: a command that ends at once has then
  // run for as long as its CPU clock says, not 14 us (TraceFigures.AShortCommandUses...: a
  // "366%" CPU share). overhead -p's windows start once the process runs again.
  t0_ = now_s();
  let_run(top);
  ran_ = true;
  fault_plan::at_stage("attached");
  report_.start_s = now_s();
  std::optional<StatusLine> status;
  if (opts_.progress) status.emplace([this](double t) { return progress_text(t); });
  attach_others();
  RunEnd end = loop();
  report_.tracer_cpu_s = thread_cpu_s() - cpu0;
  status.reset();
  report_.duration_s = now_s() - t0_;
  report_.ending = describe_end(end, root());
  std::uint64_t syscalls = sys::counters().total() - syscalls0;
  let_go();
  if (opts_.calls && opts_.calls->on_let_go) opts_.calls->on_let_go();
  report_processes();
  replay_calls();
  report_figures(syscalls);
  return report_;
}

}  // namespace trace_run

using trace_run::TraceRun;

const char* via_name(Via via) {
  return kViaNames.name(via);
}

Via parse_via(const std::string& text) {
  if (auto via = kViaNames.find(text)) return *via;
  throw UsageError("unknown --via '" + text + "' (" + kViaNames.known() + ")");
}

std::vector<Symbol> list_target_symbols(const TraceOptions& opts, const std::string& pattern) {
  auto family = TraceRun::start_target(opts);
  return ProcessSymbols(family->root().proc_tid()).list(pattern);
}

std::vector<UsdtProbe> list_target_usdt(const TraceOptions& opts, const std::string& pattern) {
  auto family = TraceRun::start_target(opts);
  // bpftrace's -l forms: usdt:*, usdt:PATH:*, usdt:*:python:*, usdt:python:line; the glob is
  // matched against MODULE:PROVIDER:NAME (by path and by file name) and PROVIDER:NAME.
  std::string glob = pattern.substr(5);
  auto match = [&](const std::string& s) { return ::fnmatch(glob.c_str(), s.c_str(), 0) == 0; };
  std::vector<UsdtProbe> out;
  for (auto& p : usdt_probes(ProcessSymbols(family->root().proc_tid()))) {
    std::string tail = p.provider + ":" + p.name;
    if (match(p.module + ":" + tail) || match(base_name(p.module) + ":" + tail) || match(tail))
      out.push_back(std::move(p));
  }
  return out;
}

TraceReport run_trace(const TraceOptions& opts, std::ostream& notes) {
  return TraceRun(opts, notes).run();
}

}  // namespace probecost