// Putting a process's probes in: resolving them in its image, a jump where the site allows
// one, an int3 elsewhere.
#include <algorithm>

#include "common/error.hpp"
#include "restore/restore.hpp"
#include "trace/run.hpp"
#include "tracer/int3/int3_area.hpp"
#include "tracer/symbols/cannot_probe.hpp"

namespace probecost::trace_run {

// `ready`: the same probes, resolved before the stop from the same symbols (prepare.cpp).
std::vector<ResolvedProbe> TraceRun::resolve(ProcessTrace& tr, bool first_image,
                                             std::optional<std::vector<ResolvedProbe>> ready) {
  TracedProcess& p = *tr.proc;
  // An IFUNC that no relocated slot shows resolved: its resolver runs in a stopped thread.
  ResolverCall call = [&p](RuntimeAddr resolver) { return p.calls().call(resolver); };
  std::vector<ResolvedProbe> out;
  std::vector<std::string> specs = split_pending(tr, opts_.probes);
  if (ready) {
    out = std::move(*ready);
  } else if (first_image && !opts_.follow_forks) {
    // With --follow-forks the probes may be meant for what the children exec (`-F -- sh -c`).
    out = resolve_probes(specs, *tr.symbols, p.memory(), p.proc_tid(), opts_.all_matches, call);
  } else {
    // In a new image a probe may name nothing: say so and go on with the others.
    auto not_probed = [&](const Error& e) {
      if (opts_.announce) {
        notes_ << opts_.tool << ": not probed in " << (first_image ? "" : "the new image of ")
               << "process " << p.pid() << ": " << e.what() << std::endl;
      }
    };
    for (const auto& spec : specs) {
      try {
        auto r =
            resolve_probes({spec}, *tr.symbols, p.memory(), p.proc_tid(), opts_.all_matches, call);
        out.insert(out.end(), r.begin(), r.end());
      } catch (const CannotProbe& e) {
        not_probed(e);
      } catch (const UsageError& e) {  // a malformed spec (record does not parse them first)
        not_probed(e);
      }
    }
  }
  merge_same_address(out);
  for (const auto& r : out) probed_specs_.insert(r.spec);
  return out;
}

void TraceRun::enable_int3(ProcessTrace& tr, const ResolvedProbe& probe) {
  TracedProcess& p = *tr.proc;
  add_int3_probe(p, *tr.step_over, probe.address, probe.spec,
                 probe.spec + " (" + probe.symbol + " at " + probe.address.hex() + ")");
  Int3Area* area = p.int3_area();
  if (std::string caveat = area ? area->caveat() : ""; !caveat.empty() && opts_.announce)
    notes_ << opts_.tool << ": process " << p.pid() << ": " << caveat << std::endl;
}

namespace {

CannotProbe no_jump(const ResolvedProbe& probe, pid_t pid, const std::string& why) {
  return CannotProbe("cannot patch a jump at " + probe.spec + " (" + probe.address.hex() +
                     ") in process " + std::to_string(pid) + ": " + why +
                     " (--via auto falls back to int3 there)");
}

}  // namespace

// Jumps where the sites allow, all planned together (a jump must not cover another probe's
// site); with --via jump, every one or none.
std::vector<ProbeInstall> TraceRun::place_jumps(ProcessTrace& tr, std::size_t from) {
  std::vector<ProbeInstall> out(tr.probes.size());
  std::vector<JumpRequest> requests;
  std::vector<std::size_t> which;
  std::vector<RuntimeAddr> others;
  pid_t pid = tr.proc->pid();
  for (std::size_t i = from; i < tr.probes.size(); ++i) {
    const ResolvedProbe& probe = tr.probes[i];
    if (probe.implementation.empty()) {
      requests.push_back(
          {probe.address, static_cast<std::uint32_t>(requests.size() + 1), probe.spec});
      which.push_back(i);
      continue;
    }
    // glibc's IFUNC implementations are hand-written assembly with several entry points:
    // __mempcpy_avx512_unaligned_erms jumps to the second instruction of
    // __memmove_avx512_unaligned_erms, from outside the function the planner decodes. A jump
    // over the first bytes would send such a branch into the middle of the jmp (SIGILL).
    out[i].why_not_jump = "an IFUNC implementation (" + probe.implementation +
                          "): other functions branch into its first bytes";
    if (opts_.via == Via::Jump) throw no_jump(probe, pid, out[i].why_not_jump);
    others.push_back(probe.address);
  }
  std::vector<std::string> why;
  auto got = tr.jumps->add_all(requests, others, *tr.symbols, why, opts_.via == Via::Jump);
  for (std::size_t k = 0; k < requests.size(); ++k) {
    ProbeInstall& pl = out[which[k]];
    pl.jump = got[k];
    pl.why_not_jump = why[k];
    if (!pl.jump && opts_.via == Via::Jump && !why[k].empty())
      throw no_jump(tr.probes[which[k]], pid, why[k]);
  }
  if (!tr.jumps->mapping_refused().empty() && opts_.announce) {
    notes_ << opts_.tool << ": no jump in process " << pid << ", " << tr.jumps->mapping_refused()
           << "; its probes are int3" << std::endl;
  }
  out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(from));
  return out;
}

// Probes [from, end) in: a jump where --via allows and the site qualifies, else an int3.
void TraceRun::place_probes(ProcessTrace& tr, std::size_t from) {
  auto got = tr.jumps ? place_jumps(tr, from) : std::vector<ProbeInstall>(tr.probes.size() - from);
  tr.installs.resize(from);
  tr.installs.insert(tr.installs.end(), got.begin(), got.end());
  for (std::size_t i = from; i < tr.probes.size(); ++i) {
    if (!tr.installs[i].jump) enable_int3(tr, tr.probes[i]);
    // A USDT marker's argument code runs only while its semaphore is raised.
    if (tr.probes[i].semaphore)
      tr.proc->raise_semaphore(*tr.probes[i].semaphore, tr.probes[i].address);
    if (opts_.usdt_args && tr.probes[i].usdt)
      tr.book.usdt_specs[tr.probes[i].address.value()] = parse_usdt_args(tr.probes[i].usdt_args);
  }
  tr.proc->held().mark("int3 probes");
  tr.proc->space().note_code();
  tr.proc->held().mark("noting the code probed");
}

// Every probe in, with every thread stopped: a jump where --via allows and the site
// qualifies, else an int3.
void TraceRun::install_image(ProcessTrace& tr) {
  TracedProcess& p = *tr.proc;
  bool first = !tr.symbols && &p == &root();
  auto ready = tr.images.empty() ? prepared_.find(p.pid()) : prepared_.end();
  std::optional<std::vector<ResolvedProbe>> probes;
  if (ready != prepared_.end() && ready->second &&
      ready->second->code_maps == code_maps(p.maps())) {
    // Read before the stop, and still true: the same files at the same places.
    tr.symbols = std::move(ready->second->symbols);
    probes = std::move(ready->second->probes);
    if (first) report_.symbols_before_stop = true;
    if (first) report_.probes_before_stop = probes.has_value();
  } else {
    tr.symbols = std::make_unique<ProcessSymbols>(p.proc_tid());
  }
  if (ready != prepared_.end()) prepared_.erase(ready);
  p.held().mark("symbols (the maps compared)");
  tr.images.push_back(tr.symbols->executable());
  tr.pending.clear();
  tr.link_map.reset();
  tr.probes = resolve(tr, first, std::move(probes));
  p.held().mark("resolving the probes");
  tr.step_over =
      make_step_over(opts_.step_over, p.memory(), scratch_mapper(p), &p.space().relocated());
  p.held().mark("step-over set up");
  drain_calls(tr, true);  // a feed left by the image before (its buffer goes with `jumps`)
  finish_stack_feed(tr);
  tr.jumps.reset();
  tr.feed.reset();
  if (opts_.calls) {
    JumpOptions jo;
    jo.calls.args = opts_.calls->args;
    jo.calls.buffer_bytes = opts_.calls->buffer_bytes;  // 0: the default
    // A sub-buffer left partly filled is copied after the flush interval (the drain is woken
    // for the rest).
    jo.calls.reader.flush_ticks =
        static_cast<std::uint64_t>(opts_.calls->tsc_hz * (CallDrain::kFlushNs * 1e-9));
    jo.calls.max_ids = static_cast<std::uint32_t>(std::max<std::size_t>(tr.probes.size(), 1));
    jo.stack_bytes = opts_.calls->stack_bytes;
    tr.jumps = std::make_unique<JumpProbes>(p, jo);
    refuse_leftovers(tr);
    tr.installs = place_calls(tr);
    start_stack_feed(tr);
    // The stacks' unwinder must see a library that comes (dlopen); without stacks, record
    // watches nothing.
    if (tr.stack_feed) watch_link_map(tr);
    return;
  }
  if (opts_.via != Via::Int3 && (!opts_.stacks || opts_.stack_size) && !opts_.usdt_args) {
    JumpOptions jo;
    jo.events = opts_.events;
    if (opts_.stacks) jo.stack_bytes = opts_.stack_size;
    jo.event_sites = static_cast<std::uint32_t>(std::max<std::size_t>(tr.probes.size(), 1));
    tr.jumps = std::make_unique<JumpProbes>(p, jo);
  }
  refuse_leftovers(tr);
  p.held().mark("looking for leftover jumps");
  place_probes(tr, 0);
  start_stack_feed(tr);
  watch_link_map(tr);
  p.held().mark("watching the link map");
}

// The out-of-line step-over's scratch pages. A process that refuses executable mappings (a
// seccomp filter, as systemd's MemoryDenyWriteExecute= installs) gets none: each site is then
// emulated or single-stepped, and says why; and we say so once.
ScratchMapper TraceRun::scratch_mapper(TracedProcess& p) {
  return [this, &p, said = false](RuntimeAddr near) mutable {
    try {
      return p.map_scratch(near);
    } catch (const Error& e) {
      if (!said && opts_.announce) {
        notes_ << opts_.tool << ": " << e.what()
               << ": no out-of-line step-over in it, its int3 probes are emulated or "
                  "single-stepped"
               << std::endl;
      }
      said = true;
      throw;
    }
  };
}

// A jump a probecost that died left at a probe's address: probing over it would make nonsense
// of both (an int3 over its jmp, or a plan over its bytes). The bytes must go back first.
void TraceRun::refuse_leftovers(ProcessTrace& tr) {
  TracedProcess& p = *tr.proc;
  std::vector<std::string> notes;
  for (const auto& area : read_jump_areas(p, notes)) {
    for (const auto& site : area.sites) {
      std::vector<std::uint8_t> now(site.patch.length);
      p.memory().read(site.patch.site, now);
      if (patch_state(site.patch, now) == PatchState::Original) continue;
      for (const auto& probe : tr.probes) {
        std::int64_t off = probe.address - site.patch.site;
        if (off < 0 || off >= static_cast<std::int64_t>(site.patch.length)) continue;
        throw Error("cannot probe " + probe.spec + " (" + probe.symbol + " at " +
                    probe.address.hex() + ") in process " + std::to_string(p.pid()) +
                    ": a jump probe that probecost (process " + std::to_string(area.tracer_pid) +
                    ") left there is still in. 'probecost restore -p " + std::to_string(p.pid()) +
                    "' puts the bytes back");
      }
    }
  }
  // The first attach to a process takes out the jump areas and call buffers an earlier
  // probecost had to leave in it (a thread it could not bring out of a trampoline) where no
  // thread can be in them now. Not in a fork child or a new image: nothing was left there.
  if (&p != &root() || p.launched() || tr.images.size() != 1) return;
  for (const auto& n : p.found_at_attach())
    notes_ << opts_.tool << ": in process " << p.pid() << ", " << n << std::endl;
  Reclaimed r = reclaim_left_areas(p);
  if (opts_.announce && r.unmapped_bytes) {
    notes_ << opts_.tool << ": in process " << p.pid() << ", unmapped " << (r.unmapped_bytes >> 10)
           << " KiB of jump areas and call buffers an earlier probecost left" << std::endl;
  }
}

}  // namespace probecost::trace_run
