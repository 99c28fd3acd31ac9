// `probecost record` in a trace run: each probed function's entry and exits as call probes (a
// jump where a patch fits, an int3 elsewhere), their events fed to the recording.
#include <x86intrin.h>

#include <algorithm>
#include <cmath>

#include "common/paths.hpp"
#include "common/status_line.hpp"
#include "record/markers.hpp"
#include "record/recorder.hpp"
#include "trace/run.hpp"
#include "tracer/os/seccomp.hpp"
#include "tracer/symbols/cxx_names.hpp"

namespace probecost::trace_run {

namespace {

record::ProbeInfo probe_info(const ResolvedProbe& p) {
  if (p.usdt) {  // symbol: PROVIDER:NAME
    record::ProbeInfo info{p.spec, p.symbol, base_name(p.module), p.address.value()};
    auto colon = p.symbol.find(':');
    info.marker = record::MarkerRole::instant;  // until assign_marker_roles
    info.marker_args =
        record::marker_args(p.symbol.substr(0, colon), p.symbol.substr(colon + 1), p.usdt_args);
    return info;
  }
  std::string name = p.implementation.empty() ? p.symbol : p.implementation;
  return {p.spec, demangle(name), base_name(p.module), p.address.value()};
}

bool same(const record::ProbeInfo& a, const record::ProbeInfo& b) {
  return a.spec == b.spec && a.function == b.function && a.module == b.module;
}

// What an int3 serves instead of a patch, said once per function, each reason once: "entry
// and exits at A, B (why)".
std::string int3_note(const CallInstall& in) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_why;
  auto add = [&](const std::string& why, const std::string& what) {
    auto it = std::find_if(by_why.begin(), by_why.end(), [&](auto& w) { return w.first == why; });
    if (it == by_why.end()) it = by_why.insert(by_why.end(), {why, {}});
    it->second.push_back(what);
  };
  if (!in.entry_jump) add(in.why_entry, "entry");
  for (const auto& e : in.int3_exits) add(e.why_not_jump, e.exit.address.hex());
  std::string s;
  for (const auto& [why, what] : by_why) {
    std::string places;
    std::size_t exits = 0;
    for (const auto& w : what) {
      if (w == "entry") continue;
      places += (exits++ ? ", " : "") + w;
    }
    std::string list = what.front() == "entry" ? "entry" : "";
    if (exits)
      list += (list.empty() ? "" : " and ") + std::string(exits > 1 ? "exits at " : "exit at ") +
              places;
    s += (s.empty() ? "" : "; ") + list + " (" + why + ")";
  }
  return s;
}

// When the int3 at the exit `exit` of `probe`'s function is one: a jcc when taken, an indirect
// jump when its target is not the function's own code (the symbols looked up then: its cold
// part's may be in a library loaded since).
CallFeed::ExitCheck exit_check(ProcessTrace& tr, const ResolvedProbe& probe,
                               const Instruction& exit) {
  CallFeed::ExitCheck check;
  if (exit.flow == Instruction::Flow::RelCondJump) check.taken_if = exit.condition;
  if (exit.flow != Instruction::Flow::IndirectJump) return check;
  check.jump = exit;
  auto fn = tr.symbols->sized_function_containing(probe.address);
  if (!fn) return check;
  ProcessTrace* t = &tr;
  check.stays = [t, fn = *fn](RuntimeAddr to) {
    return t->symbols && stays_in_function(fn, to, *t->symbols);
  };
  return check;
}

}  // namespace

// Each of the image's probes as a probe of the recording, which the first image with probes
// makes. A function a later image (an exec) probes that the first did not is not recorded.
std::vector<std::uint32_t> TraceRun::recording_probes(const ProcessTrace& tr) {
  if (!recording_) {
    for (const auto& p : tr.probes) recorded_.push_back(probe_info(p));
    record::assign_marker_roles(recorded_);
    recording_ = &opts_.calls->start(recorded_);
  }
  std::vector<std::uint32_t> out;
  for (const auto& p : tr.probes) {
    record::ProbeInfo info = probe_info(p);
    auto it = std::find_if(recorded_.begin(), recorded_.end(),
                           [&](const record::ProbeInfo& r) { return same(r, info); });
    if (it != recorded_.end()) {
      out.push_back(static_cast<std::uint32_t>(it - recorded_.begin()));
      continue;
    }
    out.push_back(record::kAnyProbe);
    if (opts_.announce) {
      notes_ << opts_.tool << ": " << info.function << " in process " << tr.proc->pid()
             << " is not recorded: the recording's functions are those of the first image"
             << std::endl;
    }
  }
  return out;
}

std::vector<ProbeInstall> TraceRun::place_calls(ProcessTrace& tr) {
  TracedProcess& p = *tr.proc;
  // An image with nothing to probe (`-F -- sh -c ...`'s shell) makes no recording yet.
  if (tr.probes.empty()) return {};
  std::vector<std::uint32_t> probe_of = recording_probes(tr);
  tr.feed = std::make_unique<CallFeed>(*recording_, p.pid(), probe_of, opts_.calls->args,
                                       opts_.calls->spool_dir);
  tr.feed->threads_of(p);
  if (opts_.calls->stack_bytes)
    tr.feed->take_stacks(std::make_unique<EntryStacks>(
        opts_.calls->spool_dir,
        static_cast<std::uint32_t>(std::max<std::size_t>(tr.probes.size(), 1))));
  p.report_thread_exits();  // each thread's name as it ends (CallFeed::thread_exiting)
  // Its comm, as ps and perf name it: the name it was run by (redis-server, a symlink to
  // redis-check-rdb), where the image's file name is the link's target.
  std::string comm = thread_name(p.pid(), p.pid());
  recording_->process_name(p.pid(), comm.empty() ? base_name(tr.images.back()) : comm);
  p.held().mark("calls: the threads' thread pointers");
  std::vector<CallRequest> requests;
  std::vector<std::size_t> which;  // requests[k] is tr.probes[which[k]]
  for (std::size_t i = 0; i < tr.probes.size(); ++i) {
    const ResolvedProbe& probe = tr.probes[i];
    if (probe.usdt) continue;  // place_markers
    requests.push_back({probe.address, static_cast<std::uint32_t>(i), probe.spec});
    which.push_back(i);
  }
  std::vector<CallInstall> got;
  if (!requests.empty()) got = tr.jumps->add_calls(requests, {}, *tr.symbols);
  if (jump::CallReader* reader = tr.jumps->call_reader()) {
    CallDrain::Options o;
    o.block = !opts_.calls->drop;
    o.wait_bound_ns = opts_.calls->wait_bound_ns;
    o.live = opts_.calls->live;
    // A seccomp filter applies to the trampolines' futex calls too, and may kill on them.
    o.writers_syscall = !seccomp::any_thread_under_seccomp(p.pid());
    if (!o.writers_syscall && opts_.announce)
      notes_ << opts_.tool << ": process " << p.pid()
             << " runs under seccomp: its trampolines make no system call (no wake, no wait "
                "for the drain, which polls every 1 ms); a record that finds its ring full is "
                "dropped and counted, as with --drop\n";
    tr.feed->start_drain(*reader, opts_.calls->spool_dir, o);
  }
  std::vector<ProbeInstall> out(tr.probes.size());
  place_markers(tr, probe_of, out);
  for (std::size_t k = 0; k < got.size(); ++k) {
    const CallInstall& in = got[k];
    std::size_t i = which[k];
    const ResolvedProbe& probe = tr.probes[i];
    auto id = static_cast<std::uint32_t>(i);
    if (!in.undecodable.empty()) {
      out[i].why_not_jump = in.undecodable;
      if (opts_.announce) {
        notes_ << opts_.tool << ": " << probe.spec << " (" << probe.address.hex()
               << ") is not recorded: " << in.undecodable << std::endl;
      }
      continue;
    }
    if (probe_of[i] != record::kAnyProbe)
      recording_->exits(probe_of[i], static_cast<std::uint32_t>(in.exits),
                        static_cast<std::uint32_t>(in.tail_exits));
    out[i].why_not_jump = int3_note(in);
    if (!out[i].why_not_jump.empty() && opts_.announce) {
      notes_ << opts_.tool << ": " << probe.spec << ": an int3 (a trap per call) serves its "
             << out[i].why_not_jump << std::endl;
    }
    if (!in.entry_jump) {
      enable_int3(tr, probe);
      tr.feed->int3_site(probe.address, id, false);
    }
    for (const auto& e : in.int3_exits) {
      add_int3_probe(p, *tr.step_over, e.exit.address, probe.spec + " (exit)");
      tr.feed->int3_site(e.exit.address, id, true, exit_check(tr, probe, e.exit));
    }
    if (!in.unseen_exits.empty() && opts_.announce) {
      notes_ << opts_.tool << ": " << probe.spec << " has " << in.unseen_exits.size()
             << " indirect jump(s) whose target cannot be computed (a frame left through one ends "
                "unmatched)"
             << std::endl;
    }
  }
  if (!tr.jumps->calls_refused().empty() && opts_.announce) {
    notes_ << opts_.tool << ": " << tr.jumps->calls_refused() << "; every entry and exit is an int3"
           << std::endl;
  }
  if (!tr.jumps->call_buffer_cold().empty() && opts_.announce)
    notes_ << opts_.tool << ": " << tr.jumps->call_buffer_cold() << std::endl;
  p.held().mark("calls: int3 entries and exits");
  return out;
}

// USDT markers: an int3 each, its semaphore raised; each hit an event with its arguments.
// (The call buffer's records carry no marker arguments: a jump would lose them.)
void TraceRun::place_markers(ProcessTrace& tr, const std::vector<std::uint32_t>& probe_of,
                             std::vector<ProbeInstall>& out) {
  for (std::size_t i = 0; i < tr.probes.size(); ++i) {
    const ResolvedProbe& probe = tr.probes[i];
    if (!probe.usdt) continue;
    out[i].why_not_jump = "a USDT marker: its arguments are read at the int3";
    enable_int3(tr, probe);
    if (probe.semaphore) tr.proc->raise_semaphore(*probe.semaphore, probe.address);
    std::vector<bool> text;
    if (probe_of[i] != record::kAnyProbe)
      for (const auto& a : recorded_[probe_of[i]].marker_args) text.push_back(a.text);
    std::vector<UsdtArg> args = parse_usdt_args(probe.usdt_args);
    args.resize(std::min(args.size(), text.size()));
    tr.feed->marker_site(probe.address, static_cast<std::uint32_t>(i), std::move(args),
                         std::move(text));
  }
}

// The image's feed is done once its buffer is final: it waits, with the others, for the trace
// to be written at the end of the run (replay_calls).
void TraceRun::drain_calls(ProcessTrace& tr, bool final) {
  if (!tr.feed || !final) return;
  tr.feed->sample_names();  // the threads still there, as they end the recording
  tr.feed->finish_drain();
  finish_stack_feed(tr);  // the entries' stacks named while the process's symbols are here
  if (const CallDrain* d = tr.feed->drain()) {
    report_.events_cpu_s += d->cpu_s();
    report_.tracer_cpu_s += d->cpu_s();
    drained_bytes_ += d->bytes();
    drain_cpu_s_ += d->cpu_s();
    if (!d->error().empty() && opts_.announce)
      notes_ << opts_.tool << ": the records of process " << tr.proc->pid()
             << " stopped being read: " << d->error() << std::endl;
  }
  if (const CallSpool* s = tr.feed->spool()) {
    if (!s->error().empty()) spool_errors_.push_back(s->error());
    spool_io_ = s->writer().how();
  }
  fed_.push_back(std::move(tr.feed));
}

// Every image's events to the recording, once every process is let go.
void TraceRun::replay_calls() {
  for (auto& feed : fed_) {
    feed->replay(opts_.announce && stderr_is_terminal() ? &notes_ : nullptr, stack_ids_);
    if (const EntryStacks::Tally* o = feed->stack_tally()) {
      report_.entry_stacks["with_stack"] += o->with_stack;
      report_.entry_stacks["truncated"] += o->truncated;
      for (const auto& [why, n] : o->without)
        report_.entry_stacks[record::stack_missing_text(why)] += n;
    }
    drained_records_ += feed->records_decoded();
    if (!feed->int3_spool().error().empty()) spool_errors_.push_back(feed->int3_spool().error());
  }
  fed_.clear();
  if (opts_.announce && drained_records_) {
    // Per call's record: the sync records (call_buffer.hpp) are in the bytes, not the count.
    auto records = static_cast<double>(drained_records_);
    notes_ << opts_.tool << ": the drain copied " << drained_records_ << " records ("
           << drained_bytes_ << " bytes, " << static_cast<double>(drained_bytes_) / records
           << " per record) in " << static_cast<double>(std::lround(drain_cpu_s_ * 1e4)) / 10
           << " ms of its CPU (" << drain_cpu_s_ * 1e9 / records << " ns per record), " << spool_io_
           << std::endl;
  }
  for (const auto& e : spool_errors_) notes_ << opts_.tool << ": error: " << e << std::endl;
  report_.spool_error = !spool_errors_.empty();
}

}  // namespace probecost::trace_run
