#include "experiment/experiment.hpp"

#include <algorithm>
#include <ctime>
#include <fstream>

#include "common/error.hpp"

namespace probecost {

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

namespace {

struct Kind {
  ExperimentId id;
  const char* name;
  Experiment (*run)(const ExperimentConfig&, const Progress&);
};

// The one table of the experiments, in the order `all` runs them.
constexpr Kind kKinds[] = {
    {ExperimentId::Markers, "markers", run_markers},
    {ExperimentId::Scalability, "scalability", run_scalability},
    {ExperimentId::MultiProbe, "multi-probe", run_multi_probe},
    {ExperimentId::Int3VsMarker, "int3-vs-marker", run_int3_vs_marker},
};

const Kind& kind_of(ExperimentId id) {
  for (const auto& k : kKinds) {
    if (k.id == id) return k;
  }
  throw Error("no experiment " + std::to_string(static_cast<int>(id)));
}

}  // namespace

const char* experiment_name(ExperimentId id) {
  return kind_of(id).name;
}

std::optional<ExperimentId> find_experiment(const std::string& name) {
  for (const auto& k : kKinds) {
    if (name == k.name) return k.id;
  }
  return std::nullopt;
}

std::vector<ExperimentId> all_experiments() {
  std::vector<ExperimentId> ids;
  for (const auto& k : kKinds) ids.push_back(k.id);
  return ids;
}

std::vector<ExperimentId> parse_experiments(const std::string& name) {
  if (name == "all") return all_experiments();
  if (auto id = find_experiment(name)) return {*id};
  std::string known;
  for (const auto& k : kKinds) known += (known.empty() ? "" : ", ") + std::string(k.name);
  throw UsageError("unknown experiment '" + name + "' (" + known + ", or all)");
}

Experiment run_experiment(ExperimentId id, const ExperimentConfig& cfg, const Progress& progress) {
  const Kind& kind = kind_of(id);
  std::string before = load_now();
  Experiment e = kind.run(cfg, progress);
  e.id = kind.id;
  e.name = kind.name;
  e.load = before + " before, " + load_now() + " after";
  e.when = utc_now();
  e.command = "probecost experiment " + e.name + " --repeat " + std::to_string(cfg.repeat) +
              (cfg.quick ? " --quick" : "");
  return e;
}

std::string load_now() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "unknown" : one;
}

namespace {

nlohmann::json table_json(const Table& t) {
  return {{"caption", t.caption}, {"columns", t.columns}, {"rows", t.rows}};
}

Table table_from_json(const nlohmann::json& j) {
  Table t;
  t.caption = j.value("caption", "");
  t.columns = j.at("columns").get<std::vector<std::string>>();
  t.rows = j.at("rows").get<std::vector<std::vector<std::string>>>();
  return t;
}

std::size_t chars(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // a UTF-8 sequence counts as one
  return n;
}

void write_table(std::ostream& out, const Table& t) {
  if (!t.caption.empty()) out << t.caption << "\n";
  std::vector<std::size_t> width(t.columns.size(), 0);
  for (std::size_t c = 0; c < t.columns.size(); ++c) width[c] = chars(t.columns[c]);
  for (const auto& row : t.rows) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], chars(row[c]));
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (std::size_t c = 0; c < cells.size() && c < width.size(); ++c) {
      std::string fill(width[c] - chars(cells[c]), ' ');
      // The first column reads left to right; numbers line up on the right.
      text += c == 0 ? cells[c] + fill : "  " + fill + cells[c];
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << text << "\n";
  };
  line(t.columns);
  for (const auto& row : t.rows) line(row);
}

}  // namespace

nlohmann::json experiment_json(const Experiment& e) {
  nlohmann::json then = nlohmann::json::array();
  for (const auto& t : e.then) then.push_back(table_json(t));
  return {{"name", e.name},
          {"title", e.title},
          {"seeds", e.seeds},
          {"machine",
           {{"cpu_model", e.machine.cpu_model},
            {"kernel", e.machine.kernel},
            {"tsc_hz", e.machine.tsc_hz},
            {"cpus", e.machine.cpus}}},
          {"placement", e.placement},
          {"load", e.load},
          {"when", e.when},
          {"command", e.command},
          {"today", table_json(e.today)},
          {"then", then},
          {"notes", e.notes},
          {"problems", e.problems},
          {"data", e.data}};
}

Experiment experiment_from_json(const nlohmann::json& j) {
  Experiment e;
  e.name = j.at("name").get<std::string>();
  e.id = find_experiment(e.name);
  e.title = j.value("title", "");
  e.seeds = j.value("seeds", "");
  const auto& m = j.at("machine");
  e.machine.cpu_model = m.value("cpu_model", "");
  e.machine.kernel = m.value("kernel", "");
  e.machine.tsc_hz = m.value("tsc_hz", 0.0);
  e.machine.cpus = m.value("cpus", 0);
  e.placement = j.value("placement", "");
  e.load = j.value("load", "");
  e.when = j.value("when", "");
  e.command = j.value("command", "");
  e.today = table_from_json(j.at("today"));
  for (const auto& t : j.at("then")) e.then.push_back(table_from_json(t));
  e.notes = j.value("notes", std::vector<std::string>{});
  e.problems = j.value("problems", std::vector<std::string>{});
  e.data = j.value("data", nlohmann::json::object());
  return e;
}

void write_experiment_text(std::ostream& out, const Experiment& e) {
  out << "probecost experiment " << e.name << ": " << e.title << " (seed " << e.seeds << ")\n";
  out << "machine:   " << e.machine.cpu_model << ", " << e.machine.kernel << ", " << e.machine.cpus
      << " CPUs\n";
  out << "placement: " << e.placement << "\n";
  out << "load:      1-minute load average " << e.load << "\n\n";
  write_table(out, e.today);
  for (const auto& t : e.then) {
    out << "\n";
    write_table(out, t);
  }
  if (!e.notes.empty()) out << "\nWhat changed since, and why:\n";
  for (const auto& n : e.notes) out << "- " << n << "\n";
  for (const auto& p : e.problems) out << "\nWARNING: " << p << "\n";
}

}  // namespace probecost
