// `probecost experiment markers` (seeds 000 and 002): every marker variant, disabled and
// enabled, with 0, 1, 3 and 6 arguments, in an empty loop and in a 4 KiB memcpy loop; cycles
// and ns per loop, and the code bytes each adds to the site.
#include <array>
#include <map>

#include "breakpoint/x86/decoder.hpp"
#include "compare/child.hpp"
#include "experiment/common.hpp"
#include "experiment/seeds.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/memory.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

namespace {

const std::vector<std::string> kVariants = {"flag", "immediate", "static-key", "nop-call"};
const std::vector<int> kArgs = {0, 1, 3, 6};

std::string symbol_of(std::string variant, int args) {
  for (auto& c : variant) c = c == '-' ? '_' : c;
  return "probecost_mv_" + variant + "_" + std::to_string(args);
}

std::string label(const std::string& variant, int args, bool on) {
  return variant + ":" + std::to_string(args) + (on ? " on" : " off");
}

Mechanism variant_mechanism(const std::string& variant, int args, bool on, std::uint64_t n) {
  return {
      MechanismId::Custom,
      label(variant, args, on),
      "",
      {"--site", "variant:" + variant + ":" + std::to_string(args), "--marker", on ? "on" : "off"},
      on ? HitSource::MarkerRecords : HitSource::SiteCalls,
      "",
      std::nullopt,
      n};
}

// The baseline first: the same site without a marker, compiled alike.
std::vector<Mechanism> mechanisms(bool memcpy_loop, bool quick) {
  std::uint64_t off = memcpy_loop ? 400'000 : 5'000'000;
  std::uint64_t on = memcpy_loop ? 400'000 : 2'000'000;
  if (quick) off = on = 5'000;
  std::vector<Mechanism> out = {variant_mechanism("none", 0, false, off)};
  out.front().name = "none";
  for (const auto& v : kVariants) {
    for (int a : kArgs) {
      out.push_back(variant_mechanism(v, a, false, off));
      out.push_back(variant_mechanism(v, a, true, on));
    }
  }
  return out;
}

struct CodeBytes {
  std::uint64_t fast_path = 0;  // from the entry to the first ret: what a disabled call runs
  std::uint64_t total = 0;      // the symbol's size, and its .cold part if any
};

std::uint64_t fast_path_bytes(std::span<const std::uint8_t> code, RuntimeAddr at) {
  std::size_t off = 0;
  while (off < code.size()) {
    auto insn = decode(code.subspan(off, std::min<std::size_t>(15, code.size() - off)), at + off);
    if (!insn) break;
    off += insn->length;
    if (insn->kind == Instruction::Kind::Ret) break;
  }
  return off;
}

// Reads the sites' code from a live inferior stopped at its start line.
std::map<std::string, CodeBytes> code_bytes(const std::string& inferior) {
  LaunchSpec spec;
  spec.argv = {inferior, "--site", "variant:none:0", "--iterations", "1", "--stop-before-loop"};
  Child child(spawn(spec));
  child.wait_for_stop();
  ProcessSymbols symbols(child.pid());
  ProcMemory memory(child.pid());
  std::map<std::string, CodeBytes> out;
  std::vector<std::string> names = {symbol_of("none", 0)};
  for (const auto& v : kVariants) {
    for (int a : kArgs) names.push_back(symbol_of(v, a));
  }
  for (const auto& name : names) {
    Symbol s = symbols.resolve(name);
    std::vector<std::uint8_t> code(s.size);
    memory.read(s.address, code);
    CodeBytes b{fast_path_bytes(code, s.address), s.size};
    for (const auto& cold : symbols.find(name + ".cold")) b.total += cold.size;
    out[name] = b;
  }
  return out;  // ~Child kills it
}

// A row's place in mechanisms() (and in compare's results, which keep their order): the
// baseline 0, then each variant's arguments, disabled then enabled.
std::size_t slot(std::size_t variant, std::size_t args, bool on) {
  return 1 + 2 * (variant * kArgs.size() + args) + (on ? 1 : 0);
}

nlohmann::json loop_json(const MechanismResult& m) {
  return {{"cycles", exp::median_cycles_per_iter(m)},
          {"added_cycles", m.per_hit_cycles.median},
          {"ns", m.ns_per_iter.median},
          {"added_ns", m.per_hit_ns.median},
          {"added_ns_min", m.per_hit_ns.min},
          {"added_ns_max", m.per_hit_ns.max}};
}

struct Results {
  CompareResult empty, copy;
  std::map<std::string, CodeBytes> code;
};

// `is_base`: the row of the site without a marker, the one the others are measured from.
std::vector<std::string> row(const Results& r, std::size_t slot, const std::string& sym,
                             const CodeBytes& base, bool is_base) {
  const auto& e = r.empty.mechanisms.at(slot);
  const auto& c = r.copy.mechanisms.at(slot);
  const CodeBytes& b = r.code.at(sym);
  auto added = [&](double v) { return is_base ? std::string("-") : signed_num(v, 2); };
  auto bytes = [&](std::uint64_t v, std::uint64_t b0) {
    return is_base ? std::to_string(v) : signed_num(double(v) - double(b0), 0);
  };
  std::string hits = exp::hits_cell(c) == "WRONG" ? "WRONG" : exp::hits_cell(e);
  return {num(exp::median_cycles_per_iter(e), 2),
          added(e.per_hit_cycles.median),
          num(e.ns_per_iter.median, 2),
          added(e.per_hit_ns.median),
          num(exp::median_cycles_per_iter(c), 1),
          added(c.per_hit_cycles.median),
          added(c.per_hit_ns.median),
          bytes(b.fast_path, base.fast_path),
          bytes(b.total, base.total),
          hits};
}

Table today_table(const Results& r) {
  Table t{"Today: cycles are TSC cycles (" + num(r.empty.machine.tsc_hz / 1e9, 3) +
              " GHz), per loop of a non-inlined call to the site; + = over the same site without "
              "a marker (first row); median of the runs",
          {"variant", "args", "state", "empty: cycles", "+cycles", "ns", "+ns",
           "memcpy 4 KiB: cycles", "+cycles", "+ns", "+bytes fast path", "+bytes total", "hits"},
          {}};
  const CodeBytes& base = r.code.at(symbol_of("none", 0));
  auto first = row(r, 0, symbol_of("none", 0), base, true);
  first.insert(first.begin(), {"none (no marker)", "-", "-"});
  t.rows.push_back(first);
  for (std::size_t v = 0; v < kVariants.size(); ++v) {
    for (std::size_t a = 0; a < kArgs.size(); ++a) {
      for (bool on : {false, true}) {
        auto cells = row(r, slot(v, a, on), symbol_of(kVariants[v], kArgs[a]), base, false);
        cells.insert(cells.begin(),
                     {kVariants[v], std::to_string(kArgs[a]), on ? "enabled" : "disabled"});
        t.rows.push_back(cells);
      }
    }
  }
  return t;
}

nlohmann::json data_json(const Results& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t v = 0; v < kVariants.size(); ++v) {
    for (std::size_t a = 0; a < kArgs.size(); ++a) {
      for (bool on : {false, true}) {
        const CodeBytes& b = r.code.at(symbol_of(kVariants[v], kArgs[a]));
        rows.push_back({{"variant", kVariants[v]},
                        {"args", kArgs[a]},
                        {"enabled", on},
                        {"empty", loop_json(r.empty.mechanisms.at(slot(v, a, on)))},
                        {"memcpy_4k", loop_json(r.copy.mechanisms.at(slot(v, a, on)))},
                        {"fast_path_bytes", b.fast_path},
                        {"total_bytes", b.total}});
      }
    }
  }
  const CodeBytes& b0 = r.code.at(symbol_of("none", 0));
  return {{"baseline",
           {{"empty", loop_json(r.empty.mechanisms.front())},
            {"memcpy_4k", loop_json(r.copy.mechanisms.front())},
            {"fast_path_bytes", b0.fast_path},
            {"total_bytes", b0.total}}},
          {"rows", rows},
          {"tsc_hz", r.empty.machine.tsc_hz}};
}

}  // namespace

std::vector<std::string> markers_notes(const nlohmann::json& data);

Experiment run_markers(const ExperimentConfig& cfg, const Progress& progress) {
  CompareConfig c = exp::base_config(cfg);
  Results r;
  c.work = "empty";
  r.empty = run_mechanisms(mechanisms(false, cfg.quick), c, exp::phase(progress, "empty loop"));
  c.work = "memcpy:4096";
  r.copy = run_mechanisms(mechanisms(true, cfg.quick), c, exp::phase(progress, "memcpy loop"));
  r.code = code_bytes(cfg.inferior);

  Experiment e;
  e.title = "disabled and enabled marker variants in an empty loop and a 4 KiB memcpy loop";
  e.seeds = "000, 002";
  e.machine = r.empty.machine;
  e.placement = "same-cpu (the inferior on CPU 0; no tracer)";
  e.today = today_table(r);
  e.then = seeds::markers_000();
  e.then.push_back(seeds::nop_site_002());
  e.data = data_json(r);
  e.notes = markers_notes(e.data);
  exp::collect_problems(r.empty, "empty loop", e);
  exp::collect_problems(r.copy, "memcpy loop", e);
  return e;
}

}  // namespace probecost
