// `probecost overhead -f json`: the whole result as one document.
#include <nlohmann/json.hpp>

#include "overhead/report.hpp"

namespace probecost {

using nlohmann::json;

namespace {

json summary(const Summary& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

json optional_summary(const std::optional<Summary>& s) {
  return s ? summary(*s) : json(nullptr);
}

json or_null(double v, bool known) {
  return known ? json(v) : json(nullptr);
}

// A traced run or window has the tracer's figures; an attached process's reference window
// (jump probes) has them too, and says it is one.
json run_json(const RunRecord& run, bool traced, bool reference) {
  json j = {{"traced", traced},
            {"wall_s", run.wall_s},
            {"cpu_s", run.cpu_s},
            {"ok", run.ok},
            {"voluntary_switches", run.voluntary_switches},
            {"involuntary_switches", run.involuntary_switches}};
  if (!run.end.empty()) j["end"] = run.end;
  if (reference) j["reference"] = true;
  if (run.end_s > 0) {
    j["start_s"] = run.start_s;
    j["end_s"] = run.end_s;
  }
  if (traced || reference) {
    j["held_s"] = run.held_s;
    j["tracer_cpu_s"] = run.tracer_cpu_s;
    j["tracer_setup_cpu_s"] = run.tracer_setup_cpu_s;
    j["hits"] = run.hits;
    j["reference_hits"] = run.reference_hits;
    j["cut_short"] = run.cut_short;
  }
  if (traced) {
    j["probe_hits"] = run.probe_hits;
    j["tracer_migrations"] = run.tracer_migrations;
    j["cpu_samples"] = run.cpu_samples;
    j["cpu_samples_apart"] = run.cpu_samples_apart;
  }
  return j;
}

json probes_json(const OverheadResult& r) {
  json probes = json::array();
  for (std::size_t i = 0; i < r.m.probes.size(); ++i) {
    const auto& p = r.m.probes[i];
    probes.push_back({{"spec", p.spec},
                      {"hits", i < r.probe_hits.size() ? r.probe_hits[i] : 0},
                      {"via", via_name(p.via)},
                      {"how", p.how},
                      {"why_not_jump", p.why_not_jump}});
  }
  return probes;
}

json predicted_json(const OverheadResult& r) {
  json predicted = json::array();
  for (const auto& p : r.predicted) {
    predicted.push_back({{"mechanism", p.mechanism},
                         {"cpu_ns_per_hit", p.cpu_ns_per_hit},
                         {"cpu_percent", p.cpu_percent},
                         {"slowdown", p.slowdown},
                         {"wall_ns_per_hit", p.wall_ns_per_hit},
                         {"cpu_share_percent", p.cpu_share_percent}});
  }
  return predicted;
}

json runs_json(const Measurement& m) {
  bool jump_reference = m.attached && m.reference == Reference::Jump;
  json runs = json::array();
  for (std::size_t i = 0; i < m.traced.size() || i < m.untraced.size(); ++i) {
    if (i < m.traced.size()) runs.push_back(run_json(m.traced[i], true, false));
    if (i < m.untraced.size()) runs.push_back(run_json(m.untraced[i], false, jump_reference));
  }
  return runs;
}

// What the traced runs are compared with: the untraced command, or an attached process's
// windows without probes or with jump probes at the sites where one fits.
json reference_json(const OverheadResult& r) {
  const Measurement& m = r.m;
  json no_jump = json::array();
  for (const auto& n : m.no_jump) no_jump.push_back({{"spec", n.spec}, {"why", n.why}});
  return {{"kind", m.reference == Reference::Jump ? "jump" : "untraced"},
          {"probes", m.reference_probes},
          {"no_jump", no_jump},
          {"wall_s", summary(r.untraced_wall)},
          {"cpu_s", summary(r.untraced_cpu)},
          {"rate_per_s", optional_summary(r.reference_rate)}};
}

json calibration_json(const Calibration& c) {
  return {{"source", c.source},
          {"age_s", c.age_s},
          {"machine", c.machine},
          {"placement", c.placement},
          {"load_1min", or_null(c.load_1min, c.load_1min >= 0)},
          {"others_cpu_share", or_null(c.others_cpu_share, c.others_cpu_share >= 0)}};
}

}  // namespace

nlohmann::json overhead_json(const OverheadResult& r) {
  const Measurement& m = r.m;
  bool untraced = m.reference == Reference::Untraced;
  return {
      {"command", m.attached ? json(nullptr) : json(m.command)},
      {"pid", m.attached ? json(m.pid) : json(nullptr)},
      {"repeat", std::max(m.traced.size(), m.untraced.size())},
      {"planned", m.planned},
      {"partial", m.partial},
      {"via", via_name(m.via)},
      {"mechanism", r.mechanism},
      {"probes", probes_json(r)},
      {"hits", r.hits},
      {"event_rate_per_s", r.event_rate_per_s},
      {"event_rate_per_cpu_s", r.event_rate_per_cpu_s},
      {"reference", reference_json(r)},
      {"untraced",
       untraced ? json{{"wall_s", summary(r.untraced_wall)}, {"cpu_s", summary(r.untraced_cpu)}}
                : json(nullptr)},
      {"traced",
       {{"wall_s", summary(r.traced_wall)},
        {"cpu_s", summary(r.traced_cpu)},
        {"tracer_cpu_s", summary(r.tracer_cpu)},
        {"held_s", summary(r.held)},
        {"rate_per_s", optional_summary(r.traced_rate)}}},
      {"measured",
       {{"slowdown", optional_summary(r.slowdown)},
        {"extra_cpu_percent", summary(r.extra_cpu_percent)},
        {"cpu_ns_per_hit", summary(r.cpu_ns_per_hit)},
        {"wall_ns_per_hit", optional_summary(r.wall_ns_per_hit)},
        {"tracer_cpu_ns_per_hit", r.tracer_ns_per_hit},
        {"command_cpu_ns_per_hit", r.command_ns_per_hit}}},
      {"evidence",
       {{"cpu_samples", r.cpu_samples},
        {"cpu_samples_apart", r.cpu_samples_apart},
        {"tracer_migrations_per_1000_hits", r.tracer_migrations_per_1000_hits},
        {"command_switches_per_hit", r.command_switches_per_hit}}},
      {"predicted", predicted_json(r)},
      {"prediction_error_percent",
       r.prediction_error_percent ? json(*r.prediction_error_percent) : json(nullptr)},
      {"prediction_error_basis", kErrorBasisNames.name(r.error_basis)},
      {"calibration", calibration_json(r.calibration)},
      {"step_over", step_over_name(m.step_over)},
      {"placement", placement_name(m.placement)},
      {"cpus", m.cpus},
      {"warmup", m.warmup},
      // Attached: the traced windows' length (median), as `hits` is theirs; and what was asked.
      {"duration_s", m.attached && !r.pairs.empty() ? json(r.traced_wall.median) : json(nullptr)},
      {"requested_duration_s", m.attached ? json(m.duration_s) : json(nullptr)},
      {"check_held_s", m.attached ? json(m.check_held_s) : json(nullptr)},
      {"load_average", {{"before", m.load_before}, {"after", m.load_after}}},
      {"others_cpu_share", or_null(m.others_cpu_share, m.others_cpu_share >= 0)},
      {"explanations", r.explanations},
      {"notes", r.notes},
      {"warnings", r.warnings},
      {"cannot_know", r.cannot_know},
      {"runs", runs_json(m)}};
}

}  // namespace probecost
