#include "trace/report.hpp"

#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <vector>

#include "common/paths.hpp"
#include "tracer/os/wait_status.hpp"

namespace probecost {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The reader's CPU per unwound snapshot (jump probes' stacks), in ns.
double snapshot_unwind_ns(const TraceReport& r) {
  return r.snapshots ? r.snapshot_unwind_s * 1e9 / static_cast<double>(r.snapshots) : 0;
}

// Jump probes' stacks: how many were copied, unwound, cut short or not copied, and why.
void write_snapshots(std::ostream& out, const TraceReport& r) {
  out << "stacks of jump hits: " << r.snapshots << " snapshots, " << r.snapshots_unwound
      << " unwound (" << fmt("%.0f", snapshot_unwind_ns(r))
      << " ns of the reader's CPU each, while the process ran), " << r.snapshots_truncated
      << " cut short by --stack-size, " << r.snapshots_lost
      << " lost (no room: the unwinding fell behind)\n";
  for (const auto& [why, n] : r.snapshots_not_copied)
    out << "  not copied: " << n << ", " << why << "\n";
  if (auto w = needed_summary(r.snapshots_needed); !w.empty())
    out << "  bytes of stack the complete ones needed: median " << w["median"] << ", 90% "
        << w["p90"] << ", 99% " << w["p99"] << ", most " << w["max"] << "\n";
}

std::string fmt_str(const char* f, const std::string& v) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, v.c_str());
  return buf;
}

// A CPU time as a share of one CPU over the trace's duration.
double cpu_percent(const TraceReport& r, double cpu_s) {
  return r.duration_s > 0 ? 100 * cpu_s / r.duration_s : 0.0;
}

std::string thread_name(const TraceReport& r, pid_t tid) {
  auto it = r.thread_names.find(tid);
  return it == r.thread_names.end() ? "" : it->second;
}

nlohmann::json thread_json(const TraceReport& r, pid_t tid, std::uint64_t hits) {
  return {{"tid", tid}, {"name", thread_name(r, tid)}, {"hits", hits}};
}

nlohmann::json to_json(const TraceReport& r) {
  nlohmann::json probes = nlohmann::json::array();
  nlohmann::json stacks = nlohmann::json::object();
  for (const auto& p : r.probes) {
    probes.push_back(
        {{"pid", p.pid},
         {"spec", p.probe.spec},
         {"address", p.probe.address.hex()},
         {"module", p.probe.module},
         {"symbol", p.probe.symbol},
         {"hits", p.hits},
         {"traced_hits_per_s", r.duration_s > 0 ? p.hits / r.duration_s : 0.0},
         // A jump hit is counted in the tracee, not by thread: no figure, as
         // text's "-" and CSV's empty field.
         {"threads", p.via == Via::Jump ? nlohmann::json() : nlohmann::json(p.threads.size())},
         {"via", via_name(p.via)},
         {"image", p.image},
         {"why_not_jump", p.why_not_jump},
         {"step_over", p.step_over},
         {"loads", p.loads},
         {"unloaded", p.unloaded}});
    if (p.via == Via::Int3) {
      nlohmann::json by_thread = nlohmann::json::array();
      for (const auto& [tid, hits] : p.threads) by_thread.push_back(thread_json(r, tid, hits));
      probes.back()["by_thread"] = by_thread;
    }
    if (!p.probe.implementation.empty()) {
      probes.back()["implementation"] = p.probe.implementation;
      probes.back()["resolved_by"] = p.probe.resolved_by;
    }
    if (!p.probe.names.empty()) probes.back()["names"] = p.probe.names;
    if (p.via == Via::Jump && (p.events_read || p.events_lost)) {
      probes.back()["events"] = {{"read", p.events_read}, {"lost", p.events_lost}};
    }
    if (r.usdt_args && p.probe.usdt) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& [args, hits] : p.usdt_args) list.push_back({{"args", args}, {"hits", hits}});
      probes.back()["usdt_args"] = list;
    }
    if (r.stacks) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& s : p.stacks) list.push_back({{"count", s.count}, {"frames", s.frames}});
      stacks[p.probe.spec] = list;
    }
  }
  nlohmann::json threads = nlohmann::json::array();
  for (const auto& [tid, hits] : r.thread_hits) threads.push_back(thread_json(r, tid, hits));
  nlohmann::json j = {{"pid", r.pid},
                      {"duration_s", r.duration_s},
                      {"probes", probes},
                      {"threads", threads},
                      {"hits", r.hits},
                      {"int3_hits", r.int3_hits},
                      {"jump_hits", r.jump_hits},
                      {"held_s", r.held_s},
                      {"symbols_before_stop", r.symbols_before_stop},
                      {"probes_before_stop", r.probes_before_stop},
                      {"modules_read_held", r.modules_read_held},
                      {"tracer_cpu_s", r.tracer_cpu_s},
                      {"tracee_cpu_s", r.tracee_cpu_s},
                      {"tracer_cpu_ns_per_int3_hit", r.tracer_cpu_ns_per_int3_hit},
                      {"tracer_cpu_ns_per_jump_hit", r.tracer_cpu_ns_per_jump_hit},
                      {"cpu_ns_per_hit", r.cpu_ns_per_hit},
                      {"syscalls_per_int3_hit", r.syscalls_per_int3_hit},
                      {"tracer_cpu_percent", cpu_percent(r, r.tracer_cpu_s)},
                      {"tracee_cpu_percent", cpu_percent(r, r.tracee_cpu_s)},
                      {"ending", r.ending}};
  if (r.launched) j["command_end"] = r.command_end;
  if (r.command_status) {
    WaitStatus ws(*r.command_status);
    j["command_status"] = ws.exited() ? ws.exit_code() : 128 + ws.term_signal();
  }
  j["images"] = r.images;
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& ph : r.held_phases) {
    phases.push_back({{"phase", ph.name}, {"wall_s", ph.wall_s}, {"cpu_s", ph.cpu_s}});
  }
  j["held_phases"] = phases;
  j["follow_forks"] = r.follow_forks;
  j["never_probed"] = r.never_probed;
  nlohmann::json processes = nlohmann::json::array();
  for (const auto& pr : r.processes) {
    processes.push_back({{"pid", pr.pid},
                         {"parent", pr.parent},
                         {"images", pr.images},
                         {"hits", pr.hits},
                         {"end", pr.end}});
  }
  j["processes"] = processes;
  j["version"] = PROBECOST_VERSION;
  if (r.stacks) {
    j["stacks"] = stacks;
    j["stack_ns_per_hit"] = r.stack_ns_per_hit;
    j["snapshots"] = {{"taken", r.snapshots},
                      {"unwound", r.snapshots_unwound},
                      {"truncated", r.snapshots_truncated},
                      {"lost", r.snapshots_lost},
                      {"not_copied", r.snapshots_not_copied},
                      {"unwind_ns_per_snapshot", snapshot_unwind_ns(r)},
                      {"needed_bytes", needed_summary(r.snapshots_needed)}};
  }
  return j;
}

// Probe rows, most hits first within each process and image (processes in the order they
// were traced, images in the order they ran).
std::vector<const ProbeReport*> sorted_rows(const TraceReport& r) {
  std::vector<const ProbeReport*> rows;
  for (const auto& p : r.probes) rows.push_back(&p);
  auto process = [&](const ProbeReport* p) {
    auto it = std::find_if(r.processes.begin(), r.processes.end(),
                           [&](const ProcessReport& pr) { return pr.pid == p->pid; });
    return it - r.processes.begin();
  };
  auto image = [&](const ProbeReport* p) {
    return std::find(r.images.begin(), r.images.end(), p->image) - r.images.begin();
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const ProbeReport* a, const ProbeReport* b) {
    if (process(a) != process(b)) return process(a) < process(b);
    return image(a) != image(b) ? image(a) < image(b) : a->hits > b->hits;
  });
  return rows;
}

bool several_processes(const TraceReport& r) {
  return r.processes.size() > 1;
}

// RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// One row per probe and image, most hits first; numbers in fixed notation.
void write_csv(std::ostream& out, const TraceReport& r) {
  out << "pid,image,spec,address,module,symbol,implementation,via,hits,traced_hits_per_s,threads\n";
  for (const ProbeReport* pp : sorted_rows(r)) {
    const ProbeReport& p = *pp;
    out << p.pid << "," << csv_field(p.image) << "," << csv_field(p.probe.spec) << ","
        << p.probe.address.hex() << "," << csv_field(p.probe.module) << ","
        << csv_field(p.probe.symbol) << "," << csv_field(p.probe.implementation) << ","
        << via_name(p.via) << "," << p.hits << ","
        << fmt("%.1f", r.duration_s > 0 ? p.hits / r.duration_s : 0.0) << ","
        << (p.via == Via::Jump ? std::string() : std::to_string(p.threads.size())) << "\n";
  }
}

// -v: each int3 probe's hits by thread, most first ("1234 worker-3 = 500").
void write_by_thread(std::ostream& out, const TraceReport& r) {
  bool any = std::any_of(r.probes.begin(), r.probes.end(),
                         [](const ProbeReport& p) { return p.via == Via::Int3; });
  if (!any) return;  // a jump probe counts in the tracee, not by thread
  out << "\nhits by probe and thread:";
  for (const ProbeReport* pp : sorted_rows(r)) {
    if (pp->via != Via::Int3) continue;
    std::vector<std::pair<pid_t, std::uint64_t>> rows(pp->threads.begin(), pp->threads.end());
    std::stable_sort(rows.begin(), rows.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    out << "\n  " << pp->probe.spec;
    if (several_processes(r)) out << " in process " << pp->pid;
    out << ":";
    if (rows.empty()) out << " none";
    for (const auto& [tid, hits] : rows) {
      out << "\n    " << tid << " " << thread_name(r, tid) << " = " << hits;
    }
  }
  out << "\n";
}

// --follow-forks: every process traced, with its parent, what it ran and its hits, and each
// probe's hits over all of them.
void write_processes(std::ostream& out, const TraceReport& r) {
  out << "\nprocesses (" << r.processes.size() << "):\n";
  for (const auto& pr : r.processes) {
    out << "  " << pr.pid;
    if (pr.parent) out << " (child of " << pr.parent << ")";
    out << ":";
    for (std::size_t i = 0; i < pr.images.size(); ++i) {
      out << (i ? " -> " : " ") << base_name(pr.images[i]);
    }
    out << ", " << pr.hits << " hits, " << pr.end << "\n";
  }
  std::vector<std::pair<std::string, std::uint64_t>> totals;
  for (const auto& p : r.probes) {
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const auto& t) { return t.first == p.probe.spec; });
    if (it == totals.end()) {
      totals.emplace_back(p.probe.spec, p.hits);
    } else {
      it->second += p.hits;
    }
  }
  out << "all processes:";
  for (const auto& [spec, hits] : totals) out << " " << spec << "=" << hits;
  out << " (" << r.hits << " hits)\n";
}

// The CPU figures: the tracer's side of a hit, int3 and jump each their own (an int3 hit
// stops the thread; a jump hit never does), and the tracee's.
// --usdt-args: each USDT probe's most frequent argument lists.
void write_usdt_args(std::ostream& out, const TraceReport& r, unsigned top) {
  for (const auto& p : r.probes) {
    if (!p.probe.usdt) continue;
    out << "\n" << p.probe.spec << " (" << p.probe.usdt_args << ")";
    if (several_processes(r)) out << " in process " << p.pid;
    out << ": " << p.usdt_args.size() << " distinct argument lists\n";
    for (std::size_t i = 0; i < p.usdt_args.size() && i < top; ++i)
      out << "  " << p.usdt_args[i].second << " hits: " << p.usdt_args[i].first << "\n";
  }
}

void write_cpu_figures(std::ostream& out, const TraceReport& r) {
  out << "tracer CPU " << fmt("%.3f", r.tracer_cpu_s) << " s ("
      << fmt("%.1f", cpu_percent(r, r.tracer_cpu_s)) << "% of a CPU)\n";
  auto any = [&](Via via) {
    return std::any_of(r.probes.begin(), r.probes.end(),
                       [via](const ProbeReport& p) { return p.via == via; });
  };
  if (r.int3_hits || any(Via::Int3)) {
    out << "  int3 hits: " << r.int3_hits << ", " << fmt("%.0f", r.tracer_cpu_ns_per_int3_hit)
        << " ns of the tracer's CPU each (the stop, the step over, the resume: its side alone); "
        << fmt("%.1f", r.syscalls_per_int3_hit) << " system calls each\n";
  }
  if (r.jump_hits || any(Via::Jump)) {
    out << "  jump hits: " << r.jump_hits << ", "
        << (r.events_cpu_s > 0 ? fmt("%.0f", r.tracer_cpu_ns_per_jump_hit) +
                                     " ns of the tracer's CPU each, reading its record"
                               : std::string("none of the tracer's CPU"))
        << " (counted in the tracee, which never stops: 'probecost compare' measures its side)\n";
  }
  out << "tracee CPU " << fmt("%.3f", r.tracee_cpu_s) << " s ("
      << fmt("%.1f", cpu_percent(r, r.tracee_cpu_s))
      << "% of a CPU): its own work and its side of each hit; tracer + tracee "
      << fmt("%.0f", r.cpu_ns_per_hit) << " ns of CPU per hit"
      << (r.int3_hits && r.jump_hits ? " (int3 and jump hits together)" : "")
      << ", its own work included\n";
}

void write_text(std::ostream& out, const TraceReport& r, unsigned top, bool verbose) {
  out << "probecost trace: process " << r.pid << ", " << fmt("%.2f", r.duration_s) << " s, "
      << r.hits << " hits; ended: " << r.ending << " (held stopped " << fmt("%.0f", r.held_s * 1e3)
      << " ms while the probes went in)\n";
  {
    char line[512];
    bool images = r.images.size() > 1, pids = several_processes(r);
    std::snprintf(line, sizeof line, "\n%s%s%-28s %-16s %-18s %-24s %10s %15s %7s\n",
                  pids ? "pid      " : "", images ? "image            " : "", "probe", "address",
                  "module", "symbol", "hits", "hits/s (traced)", "threads");
    out << line;
    std::size_t hidden = 0;
    for (const ProbeReport* pp : sorted_rows(r)) {
      const ProbeReport& p = *pp;
      // A shell forks for every command: its children's rows without a hit would bury the
      // rest. -v shows them.
      if (pids && p.pid != r.pid && p.hits == 0 && !verbose) {
        ++hidden;
        continue;
      }
      std::string image = images ? fmt_str("%-16s ", base_name(p.image)) : "";
      std::string pid = pids ? fmt_str("%-8s ", std::to_string(p.pid)) : "";
      std::snprintf(line, sizeof line, "%s%s%-28s %-16s %-18s %-24s %10llu %15.0f %7s\n",
                    pid.c_str(), image.c_str(), p.probe.spec.c_str(), p.probe.address.hex().c_str(),
                    base_name(p.probe.module).c_str(), p.probe.symbol.c_str(),
                    static_cast<unsigned long long>(p.hits),
                    r.duration_s > 0 ? p.hits / r.duration_s : 0.0,
                    p.via == Via::Jump ? "-" : std::to_string(p.threads.size()).c_str());
      out << line;
    }
    for (const auto& spec : r.never_probed) {
      out << spec << ": named nothing in any process traced\n";
    }
    if (hidden) out << "(" << hidden << " rows of other processes without a hit: -v shows them)\n";
    if (pids) write_processes(out, r);
    out << "hits/s (traced): hits per second while traced, lower than untraced by the tracing's "
           "own "
           "cost ('probecost overhead' measures the untraced rate and the cost of a hit alone)\n";
    out << "\nhow:";
    std::set<std::string> said;
    for (const auto& p : r.probes) {
      std::ostringstream how;
      how << "\n  " << p.probe.spec;
      if (r.images.size() > 1) how << " in " << base_name(p.image);
      how << ": ";
      if (!p.probe.implementation.empty()) {
        how << "IFUNC resolved to " << p.probe.implementation << " (" << p.probe.resolved_by
            << "); ";
      }
      if (p.probe.names.size() > 1) {
        how << "names";
        for (std::size_t i = 0; i < p.probe.names.size(); ++i) {
          how << (i ? ", " : " ") << p.probe.names[i];
        }
        how << "; ";
      }
      how << (p.via == Via::Int3 ? "int3, " : "") << p.step_over;
      if (!p.why_not_jump.empty()) how << "; no jump: " << p.why_not_jump;
      if (p.loads > 1)
        how << "; its library loaded " << p.loads << " times, the hits of each added";
      if (p.unloaded) how << "; its library was dlclose'd: hits until then";
      if (p.events_read || p.events_lost) {
        how << "; events: " << p.events_read << " records read, " << p.events_lost << " lost";
      }
      if (said.insert(how.str()).second) out << how.str();
    }
    // Jump probes count in the tracee, per process: only int3 hits are known per thread.
    if (!r.thread_hits.empty()) {
      out << "\nhits by thread:";
      for (const auto& [tid, hits] : r.thread_hits) out << " " << tid << "=" << hits;
    }
    out << "\n";
    if (verbose) write_by_thread(out, r);
  }
  write_cpu_figures(out, r);
  if (verbose) write_held_phases(out, r);
  if (r.stacks) {
    // Jump probes' stacks are unwound from their copies (write_snapshots): this line is the
    // int3 probes', and says nothing without an int3 hit.
    if (r.int3_hits)
      out << "stacks: unwinding took " << fmt("%.0f", r.stack_ns_per_hit)
          << " ns of the tracer's per int3 hit\n";
    if (r.snapshots || r.snapshots_lost) write_snapshots(out, r);
    for (const auto& p : r.probes) {
      out << "\n" << p.probe.spec;
      if (several_processes(r)) out << " in process " << p.pid;
      out << ": " << p.stacks.size() << " distinct stacks\n";
      for (std::size_t i = 0; i < p.stacks.size() && i < top; ++i) {
        out << "  " << p.stacks[i].count << " hits:\n";
        for (const auto& f : p.stacks[i].frames) out << "      " << f << "\n";
      }
    }
  }
  if (r.usdt_args) write_usdt_args(out, r, top);
  if (r.launched) out << "command: " << r.command_end << "\n";
}

}  // namespace

// Where the hold went: each phase's wall time (what the process felt) and probecost's CPU in it.
void write_held_phases(std::ostream& out, const TraceReport& r) {
  out << "held stopped " << fmt("%.2f", r.held_s * 1e3) << " ms, wall (probecost's CPU):";
  for (const auto& ph : r.held_phases) {
    out << "\n  " << fmt("%7.3f", ph.wall_s * 1e3) << " ms (" << fmt("%.3f", ph.cpu_s * 1e3) << ") "
        << ph.name;
  }
  out << "\n";
}

nlohmann::json trace_json(const TraceReport& r) {
  return to_json(r);
}

void write_trace_text(std::ostream& out, const TraceReport& r, unsigned top, bool verbose) {
  write_text(out, r, top, verbose);
}

void write_trace_csv(std::ostream& out, const TraceReport& r) {
  write_csv(out, r);
}

}  // namespace probecost
