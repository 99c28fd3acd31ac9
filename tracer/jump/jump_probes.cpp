#include "tracer/jump/jump_probes.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <map>

#include "common/error.hpp"

namespace probecost {

JumpProbes::JumpProbes(TracedProcess& process, const JumpOptions& options)
    : proc_(process), options_(options) {
  config_.max_sites = options.max_sites;
  if (options.events) {
    config_.event_sites = options.event_sites;
    config_.ring_capacity = options.ring_capacity;
  }
  layout_ = jump::AreaLayout::of(config_);
}

JumpProbes::~JumpProbes() {
  // Our views only: the process's mappings are its detach's to take out (OurMappings), and
  // stay while it is traced (the jumps stay valid if we are gone before removing them).
  for (Area& a : areas_) ::munmap(a.view, a.size);
  for (const auto& [b, layout] :
       {std::pair{&call_buffer_, &call_layout_}, std::pair{&stack_buffer_, &stack_layout_}}) {
    if (!b->view) continue;
    release_kept_rings(*b, *layout);
    ::munmap(b->view, b->size);
  }
}

// A call buffer the detach had to leave mapped (a thread was in a trampoline): its rings'
// pages are freed now that the last records are read, a hole punched in the memfd through our
// mapping (MADV_REMOVE), no system call in the process. Not the header and control blocks,
// which a trampoline still reads (the rings' addresses, the heads): a late record faults one
// page of its ring in again, and that is all. Never while the process is traced: that would
// fault the rings in again during a recording (issue 24, item 6).
void JumpProbes::release_kept_rings(const CallBuffer& buffer,
                                    const jump::CallBufferLayout& layout) {
  if (!proc_.detached() || !proc_.space().our_mappings().holds(buffer.tracee_at)) return;
  std::uint64_t data = layout.data_offset;
  if (data < buffer.size) ::madvise(buffer.view + data, buffer.size - data, MADV_REMOVE);
}

const std::optional<RseqRegistration>& JumpProbes::rseq() {
  if (rseq_read_) return rseq_;
  Task* t = proc_.calls().any_stopped_thread();
  if (!t) return rseq_;  // none stopped now: look again next time
  rseq_read_ = true;
  rseq_ = rseq_registration(*t, rseq_why_);
  if (rseq_) proc_.note_rseq_trampolines();
  // Counting per CPU, where every thread has a CPU number to count under; decided before the
  // first area is mapped (every area of the process has the same layout).
  if (rseq_ && options_.per_cpu_counts && !options_.events && areas_.empty()) {
    config_.cpus = rseq_->cpus;
    config_.rseq_offset = rseq_->offset;
    layout_ = jump::AreaLayout::of(config_);
  }
  return rseq_;
}

std::string JumpProbes::why_not(const JumpPlan& plan, const Probes& probes,
                                const ProcessSymbols& symbols, const std::vector<Mapping>& maps) {
  std::string why = why_other_probe(plan, probes);
  if (why.empty()) why = why_module(plan, symbols, maps);
  if (why.empty()) why = why_installed(plan);
  return why;
}

void JumpProbes::install(const Candidate& c, const std::string& label) {
  proc_.space().add_patch(c.placed->patch, label).install();
  const Trampoline& t = c.placed->trampoline;
  if (t.block) proc_.space().relocated().add(*t.block, c.plan->site);
  for (const auto& [original, copy] : t.copies) proc_.space().relocated().add(copy, original);
  if (t.jump_back) proc_.space().relocated().add_jump_back(*t.jump_back, c.plan->end());
  ++areas_[c.area].installed;
}

// The requests whose plan passes every check but the threads' (a site asked for twice is
// planned once: `first_at` says where).
std::vector<JumpProbes::Candidate> JumpProbes::candidates(
    const std::vector<JumpRequest>& requests, const std::vector<RuntimeAddr>& others,
    const ProcessSymbols& symbols, std::vector<std::string>& why,
    std::map<std::uint64_t, std::size_t>& first_at) {
  Probes probes;
  for (const auto& r : requests) probes.emplace_back(r.site, r.label);
  for (auto a : others) probes.emplace_back(a, "an int3 probe");
  auto maps = proc_.maps();
  modules_.clear();  // a pass of its own: a module's file is looked at again
  std::vector<Candidate> out;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!first_at.try_emplace(requests[i].site.value(), i).second) continue;
    Candidate c{i, plan(requests[i].site, symbols, maps, why[i]), {}, 0};
    if (c.plan && (why[i] = why_not(*c.plan, probes, symbols, maps)).empty())
      out.push_back(std::move(c));
  }
  return out;
}

std::vector<std::optional<std::size_t>> JumpProbes::add_all(
    const std::vector<JumpRequest>& requests, const std::vector<RuntimeAddr>& others,
    const ProcessSymbols& symbols, std::vector<std::string>& why, bool all_or_nothing) {
  why.assign(requests.size(), "");
  PhaseClock& held = proc_.held();
  rseq();
  held.mark("jumps: rseq registration");
  std::map<std::uint64_t, std::size_t> first_at;
  auto cands = candidates(requests, others, symbols, why, first_at);
  held.mark("jumps: plans");
  check_threads(cands, why);
  held.mark("jumps: threads' RIPs and signal frames");
  if (options_.stack_bytes && !cands.empty()) {
    // The snapshots are call buffer records, and need what those need (rseq).
    if (!ensure_stack_buffer()) {
      for (const auto& c : cands) why[c.request] = "no stack snapshot: " + stacks_refused_;
      cands.clear();
    }
    enter_stacks_of_threads();
    held.mark("jumps: stack snapshots' buffer and thread table");
  }
  const std::size_t new_areas = areas_.size();
  std::erase_if(cands, [&](Candidate& c) {
    return !place(c, site_options(requests[c.request].id), why[c.request]);
  });
  held.mark("jumps: trampolines (area mapped, written)");
  bool refused = std::any_of(why.begin(), why.end(), [](const auto& w) { return !w.empty(); });
  if (all_or_nothing && refused) cands.clear();
  std::vector<std::optional<std::size_t>> out(requests.size());
  for (const auto& c : cands) {
    install(c, requests[c.request].label);
    probes_.push_back(Probe{c.plan->site, c.plan->length, c.area, c.placed->index});
    out[c.request] = probes_.size() - 1;
  }
  forget_empty_areas(new_areas);
  held.mark("jumps: bytes written");
  for (std::size_t i = 0; i < requests.size(); ++i) {
    std::size_t first = first_at.at(requests[i].site.value());
    out[i] = out[first];
    why[i] = why[first];
  }
  return out;
}

std::optional<std::size_t> JumpProbes::add(RuntimeAddr site, const ProcessSymbols& symbols,
                                           std::uint32_t id, std::string label, std::string& why) {
  std::vector<std::string> whys;
  auto out = add_all({{site, id, std::move(label)}}, {}, symbols, whys);
  why = whys.front();
  return out.front();
}

jump::SiteOptions JumpProbes::site_options(std::uint32_t id) const {
  jump::SiteOptions opts;
  if (options_.stack_bytes && stack_reader_) {
    opts.id = id;
    opts.calls = buffer_target(stack_buffer_, stack_layout_, id);
    return opts;
  }
  opts.id = id;
  opts.events = options_.events;
  return opts;
}

bool JumpProbes::place(Candidate& c, const jump::SiteOptions& opts, std::string& why) {
  for (c.area = 0; c.area < areas_.size(); ++c.area) {
    std::string no;
    if ((c.placed = areas_[c.area].writer->add_site(*c.plan, opts, no))) return true;
  }
  if (!mapping_refused_.empty()) {
    why = mapping_refused_;
    return false;
  }
  try {
    areas_.push_back(map_area(c.plan->site));
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
  c.area = areas_.size() - 1;
  c.placed = areas_.back().writer->add_site(*c.plan, opts, why);
  return c.placed.has_value();
}

// An area mapped for jumps that were all refused in the end: no thread can ever be in it, so it
// goes (a refused jump leaves no memfd mapping in the process).
void JumpProbes::forget_empty_areas(std::size_t from) {
  for (std::size_t a = areas_.size(); a-- > from;) {
    if (areas_[a].installed) continue;
    unmap_area(areas_[a]);
    areas_.erase(areas_.begin() + static_cast<std::ptrdiff_t>(a));
    for (Probe& p : probes_) p.area -= p.area > a;
  }
}

std::uint64_t JumpProbes::hits(std::size_t probe) const {
  const Probe& p = probes_.at(probe);
  return areas_.at(p.area).writer->hits(p.index);
}

jump::Drained JumpProbes::drain(std::size_t probe, bool final) {
  Probe& p = probes_.at(probe);
  if (!options_.events) return {};
  auto d = jump::drain(areas_.at(p.area).writer->ring(p.index), p.cursor, final);
  p.read += d.records.size();
  p.lost += d.lost;
  return d;
}

}  // namespace probecost
