// Call probes (`probecost record`): each function's entry and exits as jump patches that write
// call records into the process's call buffer, checked as every jump is; an int3 where a patch
// may not go.
#include <x86intrin.h>

#include <algorithm>
#include <bit>

#include "common/error.hpp"
#include "common/names.hpp"
#include "tracer/jump/jump_probes.hpp"

namespace probecost {

namespace {

void count_exits(const CallPlans& p, CallInstall& out) {
  auto count = [&](const Instruction& exit) {
    ++out.exits;
    if (exit.flow != Instruction::Flow::Return) ++out.tail_exits;
  };
  if (p.entry && p.entry->role == PlanRole::Call) count(p.entry->covered.back());
  for (const auto& e : p.exits) count(e.covered.back());
  for (const auto& e : p.int3_exits) count(e.exit);
}

void from_plans(const CallPlans& p, CallInstall& out) {
  out.undecodable = p.undecodable;
  out.entry_jump = p.entry.has_value();
  out.why_entry = p.why_no_entry;
  out.whole = p.entry && p.entry->role == PlanRole::Call;
  out.exit_jumps = p.exits.size();
  out.int3_exits = p.int3_exits;
  out.unseen_exits = p.unseen_exits;
  count_exits(p, out);
}

constexpr auto kPlanRoleNames = name_table<PlanRole>(
    {{PlanRole::Entry, "entry"}, {PlanRole::Exit, "exit"}, {PlanRole::Call, "call"}});

const char* role_name(PlanRole role) {
  return kPlanRoleNames.name(role);
}

constexpr std::uint64_t kCallSubBuffer = 4 << 20;

// Each CPU's ring: 16 MiB, which holds a burst of 500,000 records (python3 making a million
// strings, at 64 per call of PyUnicode_New) between two drains, unless the CPUs are so many
// that the whole buffer would pass kCallBufferTotal; 4 MiB at least.
std::uint64_t default_call_buffer(std::uint32_t cpus) {
  std::uint64_t share = std::bit_floor(kCallBufferTotal / std::max<std::uint32_t>(cpus, 1));
  return std::clamp<std::uint64_t>(share, 4 << 20, 16 << 20);
}

}  // namespace

bool stays_in_function(const Symbol& fn, RuntimeAddr to, const ProcessSymbols& symbols) {
  if (to == fn.address) return false;  // a tail call to itself
  if (to > fn.address && to < fn.address + static_cast<std::int64_t>(fn.size)) return true;
  auto part = symbols.sized_function_containing(to);
  return part && part->module == fn.module && part->name.starts_with(fn.name + ".cold");
}

void JumpProbes::to_int3(const JumpPlan& plan, const std::string& why, CallInstall& out) {
  if (plan.role != PlanRole::Exit) {
    out.entry_jump = false;
    out.whole = false;
    out.why_entry = why;
  }
  if (plan.role != PlanRole::Entry) out.int3_exits.push_back({plan.covered.back(), why});
  if (plan.role == PlanRole::Exit) --out.exit_jumps;
}

bool JumpProbes::ensure_call_buffer() {
  return ensure_buffer(0, call_buffer_, call_layout_, call_reader_, calls_refused_);
}

bool JumpProbes::ensure_stack_buffer() {
  return ensure_buffer(options_.stack_bytes, stack_buffer_, stack_layout_, stack_reader_,
                       stacks_refused_);
}

bool JumpProbes::ensure_buffer(std::uint32_t stack_bytes, CallBuffer& buffer,
                               jump::CallBufferLayout& layout,
                               std::unique_ptr<jump::CallReader>& reader, std::string& refused) {
  if (reader) return true;
  if (!refused.empty()) return false;
  if (!rseq()) {
    refused = std::string(stack_bytes ? "no stack snapshots" : "no call records") + " in process " +
              std::to_string(proc_.pid()) + ": " +
              (rseq_why_.empty() ? "no thread is stopped to read it from" : rseq_why_);
    return false;
  }
  jump::CallBufferConfig config;
  config.cpus = rseq_->cpus;
  config.capacity =
      options_.calls.buffer_bytes ? options_.calls.buffer_bytes : default_call_buffer(rseq_->cpus);
  // Sub-buffers of 4 MiB, 4 at least (LTTng-UST's default count): each one the drain writes is a
  // wake of its thread and an O_DIRECT write, ~150-250 us of its CPU on a KVM guest, and a
  // writer's FUTEX_WAKE when it sleeps. 16 of 1 MiB cost a stream of a few hundred thousand
  // records a second 3.5-5 ns per record of the drain's CPU; 4 MiB ones 1.1-1.7 (docs/record.md).
  config.subbuffers =
      static_cast<std::uint32_t>(std::max<std::uint64_t>(4, config.capacity / kCallSubBuffer));
  config.args = options_.calls.args;
  config.max_ids = options_.calls.max_ids;
  config.stack_bytes = stack_bytes;
  layout = jump::CallBufferLayout::of(config);
  try {
    buffer = map_call_buffer(layout);
  } catch (const Error& e) {
    refused = e.what();
    return false;
  }
  // Before any trampoline can write: no record is older.
  reader = std::make_unique<jump::CallReader>(std::span(buffer.view, buffer.size), layout,
                                              __rdtsc(), options_.calls.reader);
  return true;
}

// Every function planned (`out`), one slot per patch (`owner`: its request; `plans`: its plan;
// Candidate::request: its slot), and the patches that pass every check but the threads'; the
// others' reasons in `why`. Every patch and every int3 of every function is among the probes a
// patch must not cover.
std::vector<JumpProbes::Candidate> JumpProbes::call_candidates(
    const std::vector<CallRequest>& requests, const std::vector<RuntimeAddr>& others,
    const ProcessSymbols& symbols, std::vector<CallInstall>& out, Slots& slots) {
  auto maps = proc_.maps();
  modules_.clear();  // a pass of its own: a module's file is looked at again
  Probes probes;
  for (auto a : others) probes.emplace_back(a, "an int3 probe");
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const CallRequest& r = requests[i];
    auto fn = symbols.sized_function_containing(r.function);
    if (!fn || fn->address != r.function) {
      out[i].undecodable = "no function symbol with a size starts at " + r.function.hex();
      continue;
    }
    auto own_part = [&symbols, &fn](RuntimeAddr to) {
      return to != fn->address && stays_in_function(*fn, to, symbols);
    };
    auto frame_kept = [&symbols](RuntimeAddr at) {
      auto cfa = symbols.cfa_from_sp(at);
      return cfa && *cfa != 8;
    };
    CallPlans p = plan_calls(fn->address, original_code(*fn, maps), own_part, frame_kept);
    from_plans(p, out[i]);
    if (!p.undecodable.empty()) continue;
    if (!p.entry) probes.emplace_back(r.function, r.label + "'s entry (an int3)");
    for (const auto& e : p.int3_exits)
      probes.emplace_back(e.exit.address, r.label + "'s exit (an int3)");
    if (p.entry) p.exits.insert(p.exits.begin(), *p.entry);
    for (auto& plan : p.exits) {
      probes.emplace_back(plan.site, r.label + "'s " + role_name(plan.role));
      slots.owner.push_back(i);
      slots.plans.push_back(std::move(plan));
    }
  }
  slots.why.assign(slots.plans.size(), "");
  std::vector<Candidate> cands;
  for (std::size_t slot = 0; slot < slots.plans.size(); ++slot) {
    if (!calls_refused_.empty()) {
      slots.why[slot] = calls_refused_;
    } else if ((slots.why[slot] = why_not(slots.plans[slot], probes, symbols, maps)).empty()) {
      cands.push_back(Candidate{slot, slots.plans[slot], {}, 0});
    }
  }
  return cands;
}

CallRecordTarget JumpProbes::buffer_target(const CallBuffer& buffer,
                                           const jump::CallBufferLayout& layout,
                                           std::uint32_t id) const {
  CallRecordTarget t;
  t.control = buffer.tracee_at + static_cast<std::int64_t>(layout.ctl_offset);
  t.layout = layout;
  t.id = id;
  t.rseq_offset = rseq_->offset;
  t.threads = buffer.tracee_at + static_cast<std::int64_t>(layout.threads_offset);
  return t;
}

jump::SiteOptions JumpProbes::call_site_options(std::uint32_t id) const {
  jump::SiteOptions opts;
  opts.id = id;
  opts.calls = buffer_target(call_buffer_, call_layout_, id);
  if (stack_reader_) opts.stacks = buffer_target(stack_buffer_, stack_layout_, id);
  return opts;
}

std::vector<CallInstall> JumpProbes::add_calls(const std::vector<CallRequest>& requests,
                                               const std::vector<RuntimeAddr>& others,
                                               const ProcessSymbols& symbols) {
  std::vector<CallInstall> out(requests.size());
  PhaseClock& held = proc_.held();
  ensure_call_buffer();
  held.mark("calls: rseq registration, call buffer (mapped, populated)");
  // `record --stacks`: each entry's snapshot, into a buffer of their own. Without it (no room
  // for it in the process), the calls are recorded all the same, without stacks.
  if (options_.stack_bytes && call_reader_ && ensure_stack_buffer()) {
    enter_stacks_of_threads();
    held.mark("calls: stack snapshots' buffer and thread table");
  }
  Slots slots;
  auto cands = call_candidates(requests, others, symbols, out, slots);
  held.mark("calls: plans");
  check_threads(cands, slots.why);
  held.mark("calls: threads' RIPs and signal frames");
  const std::size_t new_areas = areas_.size();
  std::erase_if(cands, [&](Candidate& c) {
    std::uint32_t id = requests[slots.owner[c.request]].id;
    if (id < call_layout_.max_ids) return !place(c, call_site_options(id), slots.why[c.request]);
    slots.why[c.request] = "probe id " + std::to_string(id) + " beyond the call buffer's";
    return true;
  });
  held.mark("calls: trampolines (area mapped, written)");
  std::vector<bool> in(slots.plans.size(), false);
  for (const auto& c : cands) {
    install(c, requests[slots.owner[c.request]].label + " (" + role_name(c.plan->role) + ")");
    in[c.request] = true;
  }
  forget_empty_areas(new_areas);
  held.mark("calls: bytes written");
  for (std::size_t slot = 0; slot < slots.plans.size(); ++slot) {
    if (!in[slot]) to_int3(slots.plans[slot], slots.why[slot], out[slots.owner[slot]]);
  }
  return out;
}

}  // namespace probecost
