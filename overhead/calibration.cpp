#include "overhead/calibration.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/cache.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "compare/compare.hpp"
#include "compare/machine.hpp"
#include "compare/report.hpp"

namespace probecost {

using nlohmann::json;

const char* probecost_version() {
  return PROBECOST_VERSION;
}

const CalibrationRow* Calibration::find(MechanismId id) const {
  for (const auto& r : rows) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

namespace {

std::string describe(const json& machine) {
  return machine.value("cpu_model", std::string("unknown CPU")) + ", " +
         machine.value("kernel", std::string("unknown kernel")) + ", " +
         std::to_string(machine.value("cpus", 0)) + " CPUs";
}

double median_of(const json& row, const char* key) {
  const json& v = row.at(key);
  return v.is_object() ? v.at("median").get<double>() : v.get<double>();
}

CalibrationRow row_from(const json& m) {
  CalibrationRow r;
  r.mechanism = m.at("name").get<std::string>();
  r.id = find_mechanism(r.mechanism);
  r.cpu_ns_per_hit = median_of(m, "cpu_ns_per_hit");
  r.wall_ns_per_hit = m.contains("per_hit_ns") ? median_of(m, "per_hit_ns") : r.cpu_ns_per_hit;
  r.tracer_cpu_ns_per_hit = m.value("tracer_cpu_ns_per_hit", 0.0);
  if (m.contains("step_over") && m["step_over"].is_string()) {
    r.step_over = m["step_over"];
    r.method = kStepMethodNames.find(r.step_over.substr(0, r.step_over.find(' ')));
  }
  if (m.contains("problem") && m["problem"].is_string()) r.problem = m["problem"];
  return r;
}

Calibration from_json(const json& j, const std::string& source, double age_s) {
  Calibration c;
  c.source = source;
  c.age_s = age_s;
  if (j.contains("machine")) c.machine = describe(j["machine"]);
  if (j.contains("config")) c.placement = j["config"].value("placement", std::string());
  c.placement_id = kPlacementNames.find(c.placement);
  c.version = j.value("probecost_version", std::string());
  if (j.contains("load_average") && j["load_average"].is_array() && !j["load_average"].empty()) {
    c.load_1min = j["load_average"][0].get<double>();
  }
  c.others_cpu_share = j.value("others_cpu_share", -1.0);
  bool baseline = false;
  for (const auto& m : j.at("mechanisms")) {
    if (find_mechanism(m.at("name").get<std::string>()) == MechanismId::Baseline) {
      baseline = true;
      continue;
    }
    c.rows.push_back(row_from(m));
  }
  if (!baseline) throw std::runtime_error("it has no baseline row");
  return c;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read the calibration '" + path + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

double now_unix_s() {
  return static_cast<double>(std::time(nullptr));
}

// FNV-1a: a stable short name for a machine (std::hash is not stable across builds).
std::string short_hash(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string machine_id() {
  std::ifstream in("/etc/machine-id");
  std::string id;
  in >> id;
  if (!id.empty()) return id;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

json machine_json(const Machine& m) {
  return {{"cpu_model", m.cpu_model}, {"kernel", m.kernel}, {"cpus", m.cpus}};
}

std::string cache_file(const std::string& dir, const Machine& m, const CalibrationRequest& req) {
  std::string key =
      machine_id() + "|" + m.cpu_model + "|" + m.kernel + "|" + std::to_string(m.cpus);
  return dir + "/calibration-" + probecost_version() + "-" + placement_name(req.placement) + "-" +
         step_over_name(req.step_over) + "-" + short_hash(key) + ".json";
}

// Why a cached calibration does not fit this run; empty when it does.
std::string unfit(const json& j, const Machine& m, const CalibrationRequest& req) {
  if (j.value("probecost_version", std::string()) != probecost_version())
    return "made by another version";
  const json& cached = j.contains("machine") ? j["machine"] : json::object();
  const json here = machine_json(m);  // a temporary's items() would dangle in the loop
  for (const auto& [key, value] : here.items()) {
    if (!cached.contains(key) || cached[key] != value) return "made on another machine";
  }
  if (j.at("config").value("placement", std::string()) != placement_name(req.placement))
    return "made at another placement";
  if (kStepOverNames.find(j.value("calibration_step_over", std::string())) != req.step_over)
    return "made with another step-over strategy";
  for (const auto& mech : all_mechanisms()) {
    bool found = false;
    for (const auto& row : j.at("mechanisms"))
      found = found || find_mechanism(row.at("name").get<std::string>()) == mech.id;
    if (!found) return "it has no " + mech.name + " row";
  }
  return "";
}

json measure(const CalibrationRequest& req) {
  CompareConfig cfg;
  cfg.mechanisms = all_mechanism_ids();
  cfg.repeat = 3;
  cfg.placement = req.placement;
  cfg.inferior = req.inferior;
  cfg.step_over = req.step_over;
  cfg.iteration_scale = calibration_iteration_scale(req.placement);
  auto load = load_average();
  OthersCpuMeter others;
  CompareResult result = run_compare(cfg, req.progress);
  double others_share = others.share();
  std::ostringstream out;
  write_report(out, result, Format::Json, false);
  json j = json::parse(out.str());
  j["probecost_version"] = probecost_version();
  j["created_unix_s"] = now_unix_s();
  j["load_average"] = load;
  j["others_cpu_share"] = others_share;
  j["calibration_step_over"] = step_over_name(req.step_over);
  return j;
}

// Writes by rename, so that a reader never sees half a file. Returns why it could not.
std::string store(const std::string& path, const json& j) {
  return write_atomically(path, json_text(j, 2) + "\n");
}

}  // namespace

Calibration parse_calibration(const std::string& json_text, const std::string& source,
                              double age_s) {
  try {
    return from_json(json::parse(json_text), source, age_s);
  } catch (const std::exception& e) {
    throw UsageError("the calibration '" + source +
                     "' is not a report of 'probecost compare -f json' (" + e.what() + ")");
  }
}

Calibration load_calibration_file(const std::string& path) {
  std::string text = read_file(path);
  struct stat st = {};
  double age = ::stat(path.c_str(), &st) == 0 ? now_unix_s() - st.st_mtime : 0;
  try {
    json j = json::parse(text);
    if (j.contains("created_unix_s")) age = now_unix_s() - j["created_unix_s"].get<double>();
  } catch (const std::exception&) {
    // parse_calibration says what is wrong with it
  }
  return parse_calibration(text, path, age);
}

std::string calibration_cache_dir() {
  return cache_dir();
}

double calibration_iteration_scale(Placement placement) {
  return placement == Placement::SameCpu ? 0.5 : 0.2;
}

Calibration builtin_calibration(const CalibrationRequest& req) {
  Machine machine = describe_machine();
  std::string dir = calibration_cache_dir();
  std::string path = dir.empty() ? "" : cache_file(dir, machine, req);
  std::string why_new = "--recalibrate";
  if (!req.recalibrate && !path.empty()) {
    std::ifstream in(path);
    if (!in) {
      why_new = "none cached yet";
    } else {
      try {
        json j = json::parse(in);
        why_new = unfit(j, machine, req);
        if (why_new.empty()) {
          double age = now_unix_s() - j.at("created_unix_s").get<double>();
          return from_json(j, "built-in, cached in " + path, age);
        }
      } catch (const std::exception& e) {
        why_new = "the cached one is unreadable (" + std::string(e.what()) + ")";
      }
    }
  }
  json j = measure(req);
  std::string source = "built-in, measured now (" + why_new + ")";
  std::string not_stored = path.empty() ? "neither XDG_CACHE_HOME nor HOME is set" : "";
  if (not_stored.empty()) not_stored = unfit(j, machine, req);
  if (not_stored.empty()) not_stored = store(path, j);
  source += not_stored.empty() ? ", cached in " + path : ", not cached: " + not_stored;
  return from_json(j, source, 0);
}

}  // namespace probecost
