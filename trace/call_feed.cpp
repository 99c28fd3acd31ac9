#include "trace/call_feed.hpp"

#include <x86intrin.h>

#include <algorithm>

#include "breakpoint/emulate.hpp"
#include "trace/run.hpp"

namespace probecost::trace_run {

void CallFeed::thread_appeared(pid_t tid, std::uint64_t fs_base) {
  threads_[fs_base].push_back({__rdtsc(), tid});
  names_[tid] = thread_name(pid_, tid);  // in case it is gone when its records are drained
}

void CallFeed::threads_of(TracedProcess& proc) {
  for (auto& [tid, t] : proc.tasks()) {
    if (const user_regs_struct* regs = t.regs()) thread_appeared(tid, regs->fs_base);
  }
}

pid_t CallFeed::tid_of(std::uint64_t tp, std::uint64_t tsc) {
  auto it = threads_.find(tp);
  if (it != threads_.end()) {
    // The latest thread with this thread pointer that appeared before the record.
    for (auto s = it->second.rbegin(); s != it->second.rend(); ++s) {
      if (s->tsc <= tsc) return s->tid;
    }
    // Written before the first one we saw appear: the thread we attached to.
    return it->second.front().tid;
  }
  ++unknown_;
  return 0;
}

bool CallFeed::leaves(const ExitCheck& check, const user_regs_struct& regs,
                      TraceeMemory& memory) const {
  if (check.taken_if && !condition_holds(*check.taken_if, regs.eflags)) return false;
  if (check.jump) {
    // A target that cannot be read faults the jump: the frame is not left by it.
    auto to = jump_target(*check.jump, regs, memory);
    return to && !(check.stays && check.stays(*to));
  }
  return true;
}

void CallFeed::add_int3_event(bool exit, std::uint32_t probe, pid_t tid,
                              const user_regs_struct& regs) {
  record::Event e;
  e.kind = exit ? record::EventKind::exit : record::EventKind::entry;
  e.probe = probe;
  e.pid = pid_;
  e.tid = tid;
  e.tsc = __rdtsc();
  e.sp = regs.rsp;  // the return-address slot: at the entry, and at the ret or tail jmp
  if (exit) {
    e.ret = regs.rax;
  } else {
    e.args = {regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9};
  }
  int3_events_.push_back(e);
}

bool CallFeed::on_int3(pid_t tid, RuntimeAddr at, const user_regs_struct& regs,
                       TraceeMemory& memory) {
  auto it = int3_.find(at.value());
  if (it == int3_.end() || it->second.id >= probe_of_id_.size()) return false;
  const Int3Role& role = it->second;
  std::uint32_t probe = probe_of_id_[role.id];
  if (probe == record::kAnyProbe) return true;
  if (role.entry) add_int3_event(false, probe, tid, regs);
  // An exit only when it leaves; else still inside.
  if (role.exit && leaves(role.check, regs, memory)) add_int3_event(true, probe, tid, regs);
  return true;
}

record::Event CallFeed::event_of(const jump::CallRecord& r) {
  record::Event e;
  e.kind = r.exit ? record::EventKind::exit : record::EventKind::entry;
  e.probe = r.id < probe_of_id_.size() ? probe_of_id_[r.id] : record::kAnyProbe;
  e.pid = pid_;
  e.tid = tid_of(r.tp, r.tsc);
  e.tsc = r.tsc;
  e.sp = r.sp;
  if (r.exit) {
    e.ret = r.values[0];
  } else {
    std::copy_n(r.values.begin(), args_, e.args.begin());
  }
  return e;
}

void CallFeed::drain(jump::CallReader* reader, bool final) {
  std::uint64_t horizon = UINT64_MAX;
  // The buffers are kept from drain to drain: a drain of 100,000s of records into fresh ones
  // spent a third of its time in page faults.
  out_.clear();
  if (reader) {
    reader->poll(__rdtsc(), final);
    records_.clear();
    reader->take(records_);  // in TSC order
    if (!final) horizon = reader->horizon();
    for (const auto& r : records_) {
      record::Event e = event_of(r);
      if (e.probe != record::kAnyProbe) out_.push_back(e);
    }
  }
  // The int3 events below the horizon (taken in time order too) join them, merged.
  auto later = std::find_if(int3_events_.begin(), int3_events_.end(),
                            [&](const record::Event& e) { return e.tsc >= horizon; });
  if (later != int3_events_.begin()) {
    auto middle = static_cast<std::ptrdiff_t>(out_.size());
    out_.insert(out_.end(), int3_events_.begin(), later);
    int3_events_.erase(int3_events_.begin(), later);
    std::inplace_merge(
        out_.begin(), out_.begin() + middle, out_.end(),
        [](const record::Event& a, const record::Event& b) { return a.tsc < b.tsc; });
  }
  for (const auto& e : out_) {
    // Its name (comm) as it is at its first event, as `trace` reads it at its first hit.
    if (e.tid && named_.insert(e.tid).second) {
      std::string name = thread_name(pid_, e.tid);
      rec_.thread_name(pid_, e.tid, name.empty() ? names_[e.tid] : name, e.tsc);
    }
    rec_.add(e);
  }
  if (final && reader) lost(*reader);
}

void CallFeed::lost(const jump::CallReader& reader) {
  if (lost_counted_) return;
  lost_counted_ = true;
  for (std::uint32_t id = 0; id < probe_of_id_.size(); ++id) {
    std::uint64_t n = reader.lost(id);
    if (n) rec_.lost({pid_, 0, probe_of_id_[id], n, __rdtsc()});
  }
}

}  // namespace probecost::trace_run
