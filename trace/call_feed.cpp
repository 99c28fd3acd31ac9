#include "trace/call_feed.hpp"

#include <sys/mman.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>

#include "breakpoint/x86/emulate.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "trace/run.hpp"
#include "trace/stack_copy.hpp"
#include "tracer/os/proc_files.hpp"

namespace probecost::trace_run {

void CallFeed::thread_appeared(pid_t tid, std::uint64_t fs_base) {
  threads_[fs_base].push_back({__rdtsc(), tid});
  // A new thread has its creator's name until it takes its own; its creator, stopped at the
  // clone, may have taken a new one since the last look.
  sample_names();
}

void CallFeed::sample_name(pid_t tid, std::uint64_t tsc) {
  std::string name = thread_name(pid_, tid);
  if (name.empty()) return;  // gone
  std::string& last = last_name_[tid];
  if (name == last) return;
  last = name;
  names_.push_back({tsc, tid, std::move(name)});
}

void CallFeed::sample_names() {
  std::uint64_t tsc = __rdtsc();
  for (pid_t tid : task_ids(pid_)) sample_name(tid, tsc);
}

void CallFeed::thread_exiting(pid_t tid) {
  sample_name(tid, __rdtsc());
}

void CallFeed::threads_of(TracedProcess& proc) {
  for (auto& [tid, t] : proc.threads()) {
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
                              const user_regs_struct& regs, RuntimeAddr at) {
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
  if (!exit && stopped_) {
    // The thread is stopped at the entry: its stack as a trampoline would have copied it.
    jump::StackSnapshot s;
    s.tsc = e.tsc, s.tp = static_cast<std::uint32_t>(tid) | EntryStacks::kStoppedTp;
    s.sp = regs.rsp, s.rip = at.value(), s.id = probe;
    s.rbp = regs.rbp, s.rbx = regs.rbx, s.r12 = regs.r12, s.r13 = regs.r13, s.r14 = regs.r14,
    s.r15 = regs.r15;
    std::vector<std::uint8_t> bytes;
    read_stack(tid, regs.rsp, stopped_bytes_, bytes);
    stopped_(s, std::move(bytes));
  }
  int3_events_.push(e);
}

// Read now, the thread stopped at the marker: the strings may not outlive the hit.
void CallFeed::add_marker_event(const MarkerSite& site, pid_t tid, const user_regs_struct& regs,
                                TraceeMemory& memory) {
  record::Event e;
  e.kind = record::EventKind::marker;
  e.probe = probe_of_id_[site.id];
  e.pid = pid_;
  e.tid = tid;
  e.tsc = __rdtsc();
  e.sp = regs.rsp;
  for (std::size_t i = 0; i < site.args.size() && i < e.args.size(); ++i) {
    std::optional<std::int64_t> v = usdt_arg_value(site.args[i], regs, memory);
    if (!site.text[i]) {
      e.args[i] = static_cast<std::uint64_t>(v.value_or(0));
      continue;
    }
    std::optional<std::string> text;
    if (v) text = usdt_arg_string(*v, memory, kMarkerStringBytes);
    char hex[24];
    std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(v.value_or(0)));
    e.args[i] = rec_.intern(text ? *text : v ? hex : "?");
    e.text |= static_cast<std::uint8_t>(1u << i);
  }
  int3_events_.push(e);
}

bool CallFeed::on_int3(pid_t tid, RuntimeAddr at, const user_regs_struct& regs,
                       TraceeMemory& memory) {
  if (auto m = markers_.find(at.value()); m != markers_.end()) {
    if (m->second.id < probe_of_id_.size() && probe_of_id_[m->second.id] != record::kAnyProbe)
      add_marker_event(m->second, tid, regs, memory);
    return true;
  }
  auto it = int3_.find(at.value());
  if (it == int3_.end() || it->second.id >= probe_of_id_.size()) return false;
  const Int3Role& role = it->second;
  std::uint32_t probe = probe_of_id_[role.id];
  if (probe == record::kAnyProbe) return true;
  if (role.entry) add_int3_event(false, probe, tid, regs, at);
  // An exit only when it leaves; else still inside.
  if (role.exit && leaves(role.check, regs, memory)) add_int3_event(true, probe, tid, regs, at);
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

void CallFeed::start_drain(jump::CallReader& reader, const std::string& spool_dir,
                           const CallDrain::Options& options) {
  layout_ = reader.layout();
  spool_ = std::make_unique<CallSpool>(spool_dir, layout_.record_size, layout_.max_ids,
                                       CallSpool::Kind::Calls);
  drain_ = std::make_unique<CallDrain>(reader, *spool_, options);
  reader_ = &reader;
}

void CallFeed::finish_drain() {
  if (!drain_ || !reader_) return;
  drain_->finish();
  lost_.assign(probe_of_id_.size(), {});
  for (std::uint32_t id = 0; id < probe_of_id_.size(); ++id) {
    lost_[id] = {reader_->lost(id, false), reader_->lost(id, true)};
    if (id < spool_->not_kept().size()) {
      lost_[id].entries += spool_->not_kept()[id];
      lost_[id].exits += spool_->not_kept_exits()[id];
    }
  }
  reader_ = nullptr;  // it goes with the buffer
}

// One CPU's records in the spool, chunk after chunk, decoded in order (a sync record sets
// what the calls' records after it lean on).
struct CallFeed::Stream {
  std::vector<std::pair<const std::uint8_t*, std::uint64_t>> pieces;
  std::size_t piece = 0;
  std::uint64_t at = 0;
  jump::CallDecoder decoder{0};
  std::optional<jump::CallRecord> next;
  const jump::CallRecord* peek(std::uint32_t record_size) {
    while (!next && piece < pieces.size()) {
      jump::CallRecord r;
      if (decoder.next(pieces[piece].first + at, r)) next = r;
      if (!next) advance(record_size);
    }
    return next ? &*next : nullptr;
  }
  void pop(std::uint32_t record_size) {
    next.reset();
    advance(record_size);
  }
  void advance(std::uint32_t record_size) {
    at += record_size;
    if (at >= pieces[piece].second) {
      ++piece;
      at = 0;
    }
  }
};

std::vector<CallFeed::Stream> CallFeed::streams(const std::uint8_t* spool) const {
  std::vector<Stream> out(layout_.cpus);
  for (Stream& s : out) s.decoder = jump::CallDecoder(layout_.args);
  for (const auto& c : spool_->chunks()) {
    // The drain wrote these: in bounds, whole records, a CPU of the buffer.
    if (c.cpu >= out.size() || c.bytes % layout_.record_size || !c.bytes) continue;
    out[c.cpu].pieces.emplace_back(spool + c.offset, c.bytes);
  }
  return out;
}

// The names taken up to `tsc`, in time order: each thread's name changes in the trace when
// it was seen to change (Chrome's viewers show a thread's last name).
void CallFeed::names_until(std::uint64_t tsc) {
  for (; names_given_ < names_.size() && names_[names_given_].tsc <= tsc; ++names_given_) {
    const Named& n = names_[names_given_];
    rec_.thread_name(pid_, n.tid, n.name, n.tsc);
  }
}

void CallFeed::add(const record::Event& e) {
  names_until(e.tsc);
  rec_.add(e);
}

void CallFeed::replay(std::ostream* progress, std::uint32_t& next_stack_id) {
  finish_drain();
  std::optional<EntryStacks::Matcher> matcher;
  if (stacks_) {
    const auto& names = stacks_->names();
    for (std::size_t i = 0; i < names.size(); ++i)
      rec_.stack(next_stack_id + static_cast<std::uint32_t>(i), names[i]);
    matcher.emplace(*stacks_, next_stack_id);
    next_stack_id += static_cast<std::uint32_t>(names.size());
  }
  const std::uint8_t* spool = nullptr;
  std::uint64_t size = spool_ ? spool_->size() : 0;
  if (size) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, spool_->fd(), 0);
    if (m == MAP_FAILED) throw Error::from_errno("cannot map the record spool");
    spool = static_cast<const std::uint8_t*>(m);
  }
  std::vector<Stream> cpus = spool ? streams(spool) : std::vector<Stream>();
  std::uint64_t total = size / std::max<std::uint32_t>(layout_.record_size, 1), done = 0;
  double start = now_s(), next_line = start + 1;
  EventSpool::Reader int3(int3_events_);
  std::uint64_t int3_entries = 0;
  // Each CPU's records are in TSC order, as the int3 events are: merged, oldest first.
  for (;;) {
    Stream* oldest = nullptr;
    std::uint64_t oldest_tsc = UINT64_MAX;
    for (Stream& c : cpus) {
      const jump::CallRecord* r = c.peek(layout_.record_size);
      if (r && r->tsc < oldest_tsc) {
        oldest = &c;
        oldest_tsc = r->tsc;
      }
    }
    if (const record::Event* e = int3.peek(); e && e->tsc <= oldest_tsc) {
      record::Event copy = *e;
      // An int3 takes no snapshot: said, never guessed.
      if (matcher && copy.kind == record::EventKind::entry) {
        if (stopped_asked_) {
          matcher->on_stopped_entry(copy);
        } else {
          copy.no_stack = record::StackMissing::int3;
          ++int3_entries;
        }
      }
      add(copy);
      int3.pop();
      continue;
    }
    if (!oldest) break;
    record::Event e = event_of(*oldest->next);
    if (matcher && e.probe != record::kAnyProbe) matcher->on_record(*oldest->next, e);
    oldest->pop(layout_.record_size);
    ++decoded_;
    if (e.probe != record::kAnyProbe) add(e);
    if (progress && (++done & 0xffff) == 0 && now_s() >= next_line) {
      next_line += 1;
      *progress << "\r\033[Kprobecost record: writing the trace: " << done << " of ~" << total
                << " records" << std::flush;
    }
  }
  names_until(UINT64_MAX);
  if (matcher) {
    tally_ = matcher->tally();
    if (int3_entries) tally_->without[record::StackMissing::int3] += int3_entries;
  }
  if (progress && now_s() - start >= 1) *progress << "\r\033[K" << std::flush;
  if (spool) ::munmap(const_cast<std::uint8_t*>(spool), size);
  int3_events_.clear();
  for (std::uint32_t id = 0; id < lost_.size(); ++id) {
    auto [entries, exits] = lost_[id];
    if (entries + exits)
      rec_.lost({pid_, 0, probe_of_id_[id], entries + exits, __rdtsc(), entries, exits});
  }
  lost_.clear();
  const EventSpool& held = int3_events_;
  for (std::uint32_t probe = 0; probe < held.not_kept().size(); ++probe) {
    if (held.not_kept()[probe])
      rec_.lost({pid_, 0, probe, held.not_kept()[probe], __rdtsc(), held.not_kept_entries()[probe],
                 held.not_kept_exits()[probe]});
  }
}

}  // namespace probecost::trace_run
