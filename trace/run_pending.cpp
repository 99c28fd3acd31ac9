// Libraries that come and go: a probe of a library the process has not loaded waits for its
// dlopen, and a probe whose library is dlclose'd ends there (its hits kept) and waits for the
// library to come back. Both are seen at the dynamic linker's r_brk (tracer/symbols/link_map.hpp),
// a breakpoint of probecost's own: never counted, removed on every way out as any int3.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "common/error.hpp"
#include "common/paths.hpp"
#include "trace/run.hpp"
#include "tracer/core/session.hpp"
#include "tracer/symbols/cannot_probe.hpp"
#include "tracer/symbols/usdt.hpp"

namespace probecost::trace_run {

namespace {

// Whether the dynamic linker could find a library called `module` (a path, or a file name
// in LD_LIBRARY_PATH, beside a module the process has loaded, or in the system's directories):
// a probe of it may wait for a dlopen. A name found nowhere is a typo: an error, as before.
bool loadable(const std::string& module, const ProcessSymbols& symbols) {
  if (module.find('/') != std::string::npos) return ::access(module.c_str(), F_OK) == 0;
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("LD_LIBRARY_PATH")) {
    std::istringstream in(env);
    for (std::string d; std::getline(in, d, ':');) dirs.push_back(d);
  }
  for (const auto& m : symbols.modules()) dirs.push_back(m.substr(0, m.rfind('/')));
  for (const char* d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                        "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib"}) {
    dirs.push_back(d);
  }
  return std::any_of(dirs.begin(), dirs.end(), [&](const std::string& d) {
    return !d.empty() && ::access((d + "/" + module).c_str(), F_OK) == 0;
  });
}

// `python:function__entry` written for `usdt:python:function__entry`: no library is called
// "python", and a probe that waits for one would wait for ever, silently.
void refuse_usdt_lookalike(const ProbeSpec& spec, const ProcessSymbols& symbols, pid_t pid) {
  if (spec.usdt || spec.module.empty() || spec.symbol.empty() || symbols.has_module(spec.module))
    return;
  auto found = find_usdt(UsdtSpec{"", spec.module, spec.symbol}, symbols);
  if (found.empty()) return;
  throw CannotProbe("bad probe '" + spec.text + "': process " + std::to_string(pid) +
                    " has no module '" + spec.module + "', but " + spec.module + ":" + spec.symbol +
                    " is a USDT probe of " + found.front().module + ": write usdt:" + spec.module +
                    ":" + spec.symbol);
}

}  // namespace

bool waits_for_library(const ProbeSpec& spec, const ProcessSymbols& symbols) {
  if (spec.module.empty() || symbols.has_module(spec.module)) return false;
  return loadable(spec.module, symbols);  // else resolve says what it has
}

// The specs that can be resolved now; those of a library not loaded yet wait in tr.pending.
std::vector<std::string> TraceRun::split_pending(ProcessTrace& tr, std::vector<std::string> specs) {
  for (const auto& spec : specs)
    refuse_usdt_lookalike(parse_probe(spec), *tr.symbols, tr.proc->pid());
  if (opts_.calls) return specs;  // `probecost record`'s call probes go in with the image only
  std::erase_if(specs, [&](const std::string& spec) {
    ProbeSpec ps = parse_probe(spec);
    if (!waits_for_library(ps, *tr.symbols)) return false;
    tr.pending.push_back(spec);
    if (opts_.announce) {
      notes_ << opts_.tool << ": " << spec << " waits: process " << tr.proc->pid()
             << " has not loaded " << ps.module << "; it goes in when the process loads it"
             << std::endl;
    }
    return true;
  });
  return specs;
}

// The breakpoint on r_brk, where the process has a dynamic linker and a probe may come or go
// with a library: a pending one, or one in a library (dlclose).
void TraceRun::watch_link_map(ProcessTrace& tr) {
  TracedProcess& p = *tr.proc;
  bool in_library = std::any_of(tr.probes.begin(), tr.probes.end(), [&](const auto& probe) {
    return probe.module != tr.symbols->executable();
  });
  // --stacks' snapshots: the unwinder must see a library that comes (dlopen), or the stacks
  // through it end there.
  if (tr.pending.empty() && !in_library && !tr.stack_feed) return;
  tr.link_map = LinkMapWatch::find(*tr.symbols, p.memory());
  if (!tr.link_map) {
    if (!tr.pending.empty() && opts_.announce) {
      notes_ << opts_.tool << ": process " << p.pid()
             << " has no dynamic linker to load a library later: its waiting probes never go in"
             << std::endl;
    }
    return;
  }
  add_int3_probe(p, *tr.step_over, tr.link_map->brk(), "probecost: r_brk (_dl_debug_state)");
  p.space().note_code();
}

void TraceRun::hook_link_map(ProcessTrace& tr) {
  if (!tr.link_map || !tr.session) return;
  ProcessTrace* t = &tr;
  tr.session->set_own_site(tr.link_map->brk(), [this, t](Task& task) { on_link_map(*t, task); });
}

// The dynamic linker is at r_brk, in `task`: once its map is consistent, what a dlclose took
// away ends, and what a dlopen brought goes in.
void TraceRun::on_link_map(ProcessTrace& tr, Task& task) {
  if (!tr.link_map->consistent(tr.proc->memory())) return;
  if (!tr.symbols)
    tr.symbols = std::make_unique<ProcessSymbols>(tr.proc->proc_tid());  // a fork child
  if (tr.stack_feed) {
    tr.stack_feed->refresh();  // the snapshots' unwinder sees the new modules
    // And the names: the stacks are named once the process is gone, too late to read its maps.
    if (tr.pending.empty()) tr.symbols->refresh();
  }
  auto gone = tr.proc->forget_moved_code();
  if (!gone.empty()) retire(tr, gone);
  if (!tr.pending.empty()) install_pending(tr, task);
}

// Probes whose code went away (dlclose): their rows now, hits so far, and they wait for the
// library to come back. Nothing is written: the bytes went with the mapping.
void TraceRun::retire(ProcessTrace& tr, const std::vector<LeftAlone>& gone) {
  std::string image = tr.images.empty() ? std::string() : tr.images.back();
  for (std::size_t i = tr.probes.size(); i-- > 0;) {
    auto it = std::find_if(gone.begin(), gone.end(),
                           [&](const LeftAlone& g) { return g.at == tr.probes[i].address; });
    if (it == gone.end()) continue;
    ProbeReport row = probe_row(tr, i, image);
    row.unloaded = true;
    if (opts_.announce) {
      notes_ << opts_.tool << ": process " << tr.proc->pid() << ": " << row.probe.spec
             << " ended after " << row.hits << " hits: " << it->why
             << "; it goes in again if the library comes back" << std::endl;
    }
    report_.probes.push_back(row);
    tr.book.threads_by_site.erase(tr.probes[i].address.value());
    tr.proc->space().sites().remove(tr.probes[i].address);  // forgotten: removing writes nothing
    if (tr.probes[i].semaphore) tr.proc->forget_semaphore(*tr.probes[i].semaphore);
    // Its spec, or each of the specs merged into it ("SPEC1, SPEC2": merge_same_address).
    std::istringstream specs(row.probe.spec);
    for (std::string spec; std::getline(specs, spec, ',');) {
      spec.erase(0, spec.find_first_not_of(' '));
      if (std::find(tr.pending.begin(), tr.pending.end(), spec) == tr.pending.end()) {
        tr.pending.push_back(spec);
      }
    }
    tr.probes.erase(tr.probes.begin() + static_cast<std::ptrdiff_t>(i));
    tr.installs.erase(tr.installs.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

// Pending probes whose library is mapped now go in, every other thread stopped meanwhile. The
// library has just been mapped and no thread runs its code yet; its IFUNC relocations are not
// done, so an IFUNC resolver is not called in it (its relocated slots may tell).
void TraceRun::install_pending(ProcessTrace& tr, Task& task) {
  TracedProcess& p = *tr.proc;
  tr.symbols->refresh();
  std::vector<std::string> ready;
  std::erase_if(tr.pending, [&](const std::string& spec) {
    std::string module = parse_probe(spec).module;
    if (!module.empty() && !tr.symbols->has_module(module)) return false;
    ready.push_back(spec);
    return true;
  });
  if (ready.empty()) return;
  std::vector<ResolvedProbe> fresh;
  for (const auto& spec : ready) {
    try {
      auto r = resolve_probes({spec}, *tr.symbols, p.memory(), p.proc_tid(), opts_.all_matches);
      fresh.insert(fresh.end(), r.begin(), r.end());
      probed_specs_.insert(spec);
    } catch (const Error& e) {
      if (opts_.announce) {
        notes_ << opts_.tool << ": not probed in process " << p.pid() << ": " << e.what()
               << std::endl;
      }
    }
  }
  OthersStopped others(p, task.tid());
  std::size_t from = tr.probes.size();
  tr.probes.insert(tr.probes.end(), fresh.begin(), fresh.end());
  try {
    place_probes(tr, from);
  } catch (const CannotProbe& e) {  // --via jump refused one: nothing of them went in
    notes_ << opts_.tool << ": not probed in process " << p.pid() << ": " << e.what() << std::endl;
    tr.probes.resize(from);
    tr.installs.resize(from);
    return;
  }
  if (!opts_.announce) return;
  for (std::size_t i = from; i < tr.probes.size(); ++i) {
    notes_ << opts_.tool << ": process " << p.pid() << " loaded " << base_name(tr.probes[i].module)
           << ": " << tr.probes[i].spec << " is in (" << (tr.installs[i].jump ? "jump" : "int3")
           << ")" << std::endl;
  }
}

}  // namespace probecost::trace_run
