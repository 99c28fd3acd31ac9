// probecost overhead's arithmetic and calibration parsing, on fixtures: no process is run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/error.hpp"
#include "overhead/calibration.hpp"
#include "overhead/overhead.hpp"

using namespace probecost;

namespace {

// A `compare -f json` report cut to what a calibration reads, with a mechanism probecost has
// never heard of ("uprobe"): it must appear among the predictions all the same.
const char* kCompareJson = R"json({
  "machine": {"cpu_model": "Test CPU", "kernel": "Linux 9.9", "tsc_hz": 1e9, "cpus": 2},
  "config": {"placement": "same-cpu", "repeat": 3},
  "mechanisms": [
    {"name": "baseline", "cpu_ns_per_hit": {"median": 0, "min": 0, "max": 0},
     "per_hit_ns": {"median": 0, "min": 0, "max": 0}, "tracer_cpu_ns_per_hit": 0},
    {"name": "marker", "cpu_ns_per_hit": {"median": 8, "min": 8, "max": 9},
     "per_hit_ns": {"median": 8, "min": 8, "max": 9}, "tracer_cpu_ns_per_hit": 0},
    {"name": "int3-ptrace-fast", "cpu_ns_per_hit": {"median": 10000, "min": 9000, "max": 11000},
     "per_hit_ns": {"median": 20000, "min": 19000, "max": 21000},
     "tracer_cpu_ns_per_hit": 4000, "step_over": "outline 'push %rbp' (1 byte)"
},
    {"name": "jump", "cpu_ns_per_hit": {"median": 2, "min": 2, "max": 3},
     "per_hit_ns": {"median": 2, "min": 2, "max": 3}, "tracer_cpu_ns_per_hit": 0},
    {"name": "uprobe", "cpu_ns_per_hit": {"median": 500, "min": 450, "max": 600},
     "per_hit_ns": {"median": 500, "min": 450, "max": 600}, "problem": "made up"}
  ]
})json";

Calibration fixture_calibration() {
  return parse_calibration(kCompareJson, "fixture.json", 60);
}

RunRecord untraced(double wall, double cpu) {
  RunRecord r;
  r.wall_s = wall;
  r.cpu_s = cpu;
  r.end = "exited with status 0";
  return r;
}

RunRecord traced(double wall, double cpu, double tracer, std::uint64_t hits) {
  RunRecord r = untraced(wall, cpu);
  r.tracer_cpu_s = tracer;
  r.hits = hits;
  r.probe_hits = {hits};
  return r;
}

// Three pairs of a workload making 100,000 events in 1 s of wall time (0.8 s of CPU) untraced.
Measurement fixture_measurement() {
  Measurement m;
  m.command = {"/bin/work"};
  m.via = Via::Int3;
  m.step_over = StepOverChoice::Auto;
  m.placement = Placement::SameCpu;
  m.cpus_online = 2;
  m.load_before = m.load_after = {0.1, 0.1, 0.1};
  m.probes = {{"work_fn", Via::Int3, "outline 'push %rbp' (1 byte)", "", StepMethod::Outline}};
  m.untraced = {untraced(1.0, 0.8), untraced(1.1, 0.9), untraced(0.9, 0.7)};
  m.traced = {traced(3.0, 1.6, 1.0, 100'000), traced(3.3, 1.8, 1.1, 100'000),
              traced(2.7, 1.4, 0.9, 100'000)};
  return m;
}

}  // namespace

TEST(Calibration, EveryMechanismButTheBaselineInTheReportsOrder) {
  Calibration c = fixture_calibration();
  ASSERT_EQ(c.rows.size(), 4u);
  EXPECT_EQ(c.rows[0].mechanism, "marker");
  EXPECT_EQ(c.rows[3].mechanism, "uprobe");
  EXPECT_EQ(c.rows[3].problem, "made up");
  const CalibrationRow* fast = c.find(MechanismId::Int3PtraceFast);
  ASSERT_NE(fast, nullptr);
  EXPECT_EQ(fast->cpu_ns_per_hit, 10000);
  EXPECT_EQ(fast->wall_ns_per_hit, 20000);
  EXPECT_EQ(fast->tracer_cpu_ns_per_hit, 4000);
  EXPECT_EQ(fast->step_over, "outline 'push %rbp' (1 byte)");
  EXPECT_EQ(fast->method, StepMethod::Outline);
  EXPECT_EQ(fast->id, MechanismId::Int3PtraceFast);
  EXPECT_EQ(c.machine, "Test CPU, Linux 9.9, 2 CPUs");
  EXPECT_EQ(c.placement, "same-cpu");
  EXPECT_EQ(c.age_s, 60);
  EXPECT_EQ(c.find(MechanismId::Baseline), nullptr);
}

TEST(Calibration, WhatIsNotACompareReportIsAUsageError) {
  for (const char* bad : {"", "not json", "{}", R"({"mechanisms": []})",
                          R"({"mechanisms": [{"name": "marker", "cpu_ns_per_hit": 1}]})"}) {
    EXPECT_THROW(parse_calibration(bad, "bad.json", 0), UsageError) << bad;
  }
  EXPECT_THROW(load_calibration_file("/no/such/calibration.json"), UsageError);
}

TEST(OverheadModel, RatesSlowdownAndExtraCpuFromThePairs) {
  OverheadResult r = analyze(fixture_measurement(), fixture_calibration());
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.hits, 100'000u);
  EXPECT_EQ(r.mechanism, "int3-ptrace-fast");
  EXPECT_DOUBLE_EQ(r.untraced_wall.median, 1.0);
  EXPECT_DOUBLE_EQ(r.untraced_cpu.median, 0.8);
  EXPECT_DOUBLE_EQ(r.event_rate_per_s, 100'000);      // hits / untraced wall
  EXPECT_DOUBLE_EQ(r.event_rate_per_cpu_s, 125'000);  // hits / untraced CPU
  ASSERT_TRUE(r.slowdown);
  EXPECT_NEAR(r.slowdown->median, 3.0, 1e-12);  // every pair: 3x
  EXPECT_NEAR(r.slowdown->min, 3.0, 1e-12);
  // Pair 1: (1.6 + 1.0 - 0.8) / 0.8 = 225% extra; 1.8 s over 100,000 hits = 18 µs per hit.
  EXPECT_NEAR(r.extra_cpu_percent.median, 225, 1e-9);
  EXPECT_NEAR(r.cpu_ns_per_hit.median, 18'000, 1e-6);
  EXPECT_NEAR(r.tracer_ns_per_hit, 10'000, 1e-6);
  EXPECT_NEAR(r.command_ns_per_hit, 8'000, 1e-6);
  ASSERT_TRUE(r.wall_ns_per_hit);
  EXPECT_NEAR(r.wall_ns_per_hit->median, 20'000, 1e-6);
}

TEST(OverheadModel, PredictsEveryCalibratedMechanismAndTheErrorOfTheOneUsed) {
  OverheadResult r = analyze(fixture_measurement(), fixture_calibration());
  ASSERT_EQ(r.predicted.size(), 4u);
  EXPECT_EQ(r.predicted[3].mechanism, "uprobe");
  const Prediction* used = r.used();
  ASSERT_NE(used, nullptr);
  EXPECT_EQ(used->mechanism, "int3-ptrace-fast");
  // 125,000 events per CPU second x 10 µs = 125% extra CPU; 100,000/s x 10 µs = 100% of a CPU;
  // 100,000/s x 20 µs of wall time = 2 s more per second: 3x.
  EXPECT_NEAR(used->cpu_percent, 125, 1e-9);
  EXPECT_NEAR(used->cpu_share_percent, 100, 1e-9);
  EXPECT_NEAR(used->slowdown, 3.0, 1e-12);
  ASSERT_TRUE(r.prediction_error_percent);
  EXPECT_NEAR(*r.prediction_error_percent, 0, 1e-9);
  EXPECT_EQ(r.error_basis, ErrorBasis::Slowdown);
  EXPECT_TRUE(r.explanations.empty());  // within 20%: nothing to explain
  EXPECT_NEAR(r.predicted[0].slowdown, 1 + 100'000 * 8e-9, 1e-12);  // marker
}

// compare's record row (a call's entry and return records): predicted per hit as any row, and
// said what it predicts.
TEST(OverheadModel, RecordIsPredictedPerCall) {
  std::string json = kCompareJson;
  json.replace(json.find(R"(    {"name": "uprobe")"), 0,
               R"(    {"name": "record", "cpu_ns_per_hit": {"median": 20, "min": 19, "max": 22},
     "per_hit_ns": {"median": 22, "min": 21, "max": 25}, "tracer_cpu_ns_per_hit": 0},
)");
  OverheadResult r = analyze(fixture_measurement(), parse_calibration(json, "fixture.json", 60));
  ASSERT_EQ(r.predicted.size(), 5u);
  EXPECT_EQ(r.predicted[3].mechanism, "record");
  // 100,000 calls/s x 22 ns; 125,000 calls per CPU second x 20 ns.
  EXPECT_NEAR(r.predicted[3].slowdown, 1 + 100'000 * 22e-9, 1e-12);
  EXPECT_NEAR(r.predicted[3].cpu_percent, 125'000 * 20 / 1e7, 1e-9);
  std::string notes;
  for (const auto& n : r.notes) notes += n + "\n";
  EXPECT_NE(notes.find("The record row predicts `probecost record -b`"), std::string::npos)
      << notes;
  EXPECT_EQ(analyze(fixture_measurement(), fixture_calibration()).notes.size(),
            r.notes.size() - 1);  // no record row: no such note
}

TEST(OverheadModel, ALargeErrorIsExplainedWithItsEvidence) {
  Measurement m = fixture_measurement();
  m.placement = Placement::Free;  // the calibration is same-cpu
  m.others_cpu_share = 0.3;
  for (auto& t : m.traced) {
    t.wall_s *= 2;  // twice the wall time for the same CPU: nobody ran meanwhile
    t.cpu_samples = 10;
    t.cpu_samples_apart = 9;
  }
  OverheadResult r = analyze(m, fixture_calibration());
  ASSERT_TRUE(r.prediction_error_percent);
  EXPECT_NEAR(*r.prediction_error_percent, 100 * (3.0 / 6.0 - 1), 1e-9);
  std::string all;
  for (const auto& e : r.explanations) all += e + "\n";
  EXPECT_NE(all.find("placement same-cpu, this run at free"), std::string::npos) << all;
  EXPECT_NE(all.find("ran on no CPU"), std::string::npos) << all;
  EXPECT_NE(all.find("at 27 of 30 looks"), std::string::npos) << all;
  EXPECT_NE(all.find("Other processes used 30% of the 2 CPUs' time during the runs"),
            std::string::npos)
      << all;
}

TEST(OverheadModel, FailedRunsAreLeftOutAndSaidSo) {
  Measurement m = fixture_measurement();
  m.traced[1].ok = false;
  m.traced[1].end = "exited with status 3";
  m.traced[1].wall_s = 100;  // a failed run's figure must not count
  OverheadResult r = analyze(m, fixture_calibration());
  EXPECT_EQ(r.pairs, (std::vector<std::size_t>{0, 2}));
  EXPECT_NEAR(r.slowdown->max, 3.0, 1e-12);
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_EQ(r.warnings[0], "traced run 2: the command exited with status 3");
  EXPECT_FALSE(r.trustworthy());

  for (auto& u : m.untraced) u.ok = false;  // none left: all are used, and said so
  r = analyze(m, fixture_calibration());
  EXPECT_EQ(r.pairs.size(), 3u);
  EXPECT_NE(r.warnings.back().find("no pair of runs ended with status 0"), std::string::npos);
}

TEST(OverheadModel, HitCountsThatDifferAreAWarning) {
  Measurement m = fixture_measurement();
  m.traced[2].hits = 99'000;
  OverheadResult r = analyze(m, fixture_calibration());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("different numbers of hits"), std::string::npos);
  EXPECT_EQ(r.hits, 100'000u);  // the median
}

TEST(OverheadModel, ProbesOnDifferentMechanismsArePredictedByTheirHits) {
  Measurement m = fixture_measurement();
  m.via = Via::Auto;
  m.probes.push_back({"other_fn", Via::Jump, "jump over 5 bytes", "", std::nullopt});
  for (auto& t : m.traced) t.probe_hits = {25'000, 75'000};
  OverheadResult r = analyze(m, fixture_calibration());
  EXPECT_EQ(r.mechanism, "mixed: int3-ptrace-fast + jump");
  EXPECT_EQ(r.mechanisms_used,
            (std::vector<MechanismId>{MechanismId::Int3PtraceFast, MechanismId::Jump}));
  EXPECT_TRUE(r.uses_int3());
  const Prediction* used = r.used();
  ASSERT_NE(used, nullptr);
  EXPECT_NEAR(used->cpu_ns_per_hit, 0.25 * 10000 + 0.75 * 2, 1e-9);
  EXPECT_NEAR(used->wall_ns_per_hit, 0.25 * 20000 + 0.75 * 2, 1e-9);
}

TEST(OverheadModel, AttachedHasNoSlowdownAndSaysWhatItCannotKnow) {
  Measurement m = fixture_measurement();
  m.attached = true;
  m.pid = 4242;
  m.command.clear();
  // 2 s windows: untraced 0.5 CPU-s per s; traced 2 s with 1.2 + 0.8 CPU-s and 100,000 hits.
  m.untraced = {untraced(2.0, 1.0)};
  m.traced = {traced(2.0, 1.2, 0.8, 100'000)};
  OverheadResult r = analyze(m, fixture_calibration());
  EXPECT_FALSE(r.slowdown);
  EXPECT_FALSE(r.wall_ns_per_hit);
  EXPECT_DOUBLE_EQ(r.event_rate_per_s, 50'000);        // the traced window's
  EXPECT_DOUBLE_EQ(r.event_rate_per_cpu_s, 100'000);   // over 0.5 CPU busy untraced
  EXPECT_NEAR(r.extra_cpu_percent.median, 100, 1e-9);  // (2.0 - 1.0) / 1.0
  EXPECT_NEAR(r.cpu_ns_per_hit.median, 10'000, 1e-6);
  EXPECT_EQ(r.error_basis, ErrorBasis::ExtraCpu);
  ASSERT_TRUE(r.prediction_error_percent);
  EXPECT_NEAR(*r.prediction_error_percent, 0, 1e-9);  // 100,000/s x 10 µs = 100%
  ASSERT_EQ(r.cannot_know.size(), 3u);
  EXPECT_NE(r.cannot_know[0].find("did not start process 4242"), std::string::npos);
}

TEST(OverheadModel, MechanismOfAProbe) {
  EXPECT_EQ(mechanism_of({"f", Via::Jump, "", "", std::nullopt}, StepOverChoice::Auto), "jump");
  EXPECT_EQ(mechanism_of({"f", Via::Int3, "", "", StepMethod::Outline}, StepOverChoice::Auto),
            "int3-ptrace-fast");
  EXPECT_EQ(mechanism_of({"f", Via::Int3, "", "", StepMethod::Outline}, StepOverChoice::Outline),
            "int3-ptrace-fast");
  EXPECT_EQ(mechanism_of({"f", Via::Int3, "", "", StepMethod::Outline}, StepOverChoice::SingleStep),
            "int3-ptrace");
}

TEST(OverheadModel, BothSidesDearerAtTheSamePlacementIsTheMachinesSpeed) {
  Measurement m = fixture_measurement();  // same-cpu, as the calibration
  m.untraced = {untraced(1.0, 0.8)};
  m.traced = {traced(5.0, 2.4, 1.6, 100'000)};  // probecost 16 µs (4 µs), command 16 µs (6 µs)
  OverheadResult r = analyze(m, fixture_calibration());
  ASSERT_TRUE(r.prediction_error_percent);
  EXPECT_NEAR(*r.prediction_error_percent, 100 * (3.0 / 5.0 - 1), 1e-9);
  ASSERT_FALSE(r.explanations.empty());
  EXPECT_EQ(
      r.explanations[0].rfind("Both sides of a hit cost more here than in the calibration "
                              "(probecost 16.0 µs here against 4.00 µs in the calibration, the "
                              "command 16.0 µs against 6.00 µs), at the same placement",
                              0),
      0u)
      << r.explanations[0];
}

TEST(OverheadModel, AttachedBusyProcessThatSlowsDownIsSaidSo) {
  Measurement m = fixture_measurement();
  m.attached = true;
  m.pid = 4242;
  m.untraced = {untraced(2.0, 2.0)};            // one CPU busy
  m.traced = {traced(2.0, 1.2, 0.8, 100'000)};  // 0.6 CPU: it waited at the stops
  OverheadResult r = analyze(m, fixture_calibration());
  EXPECT_FALSE(r.prediction_error_percent);  // no extra CPU to compare with
  EXPECT_EQ(r.error_basis, ErrorBasis::ExtraCpu);
  std::string all;
  for (const auto& e : r.explanations) all += e + "\n";
  EXPECT_NE(all.find("The process was busy untraced (1.00 CPUs) and used less while traced (0.60)"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("The process used no more CPU (its own and probecost's) in the traced window "
                     "than in the untraced one (+0.0%): there is no extra CPU to compare"),
            std::string::npos)
      << all;
}

TEST(OverheadModel, AJumpThatOnlyCountsCostsLessThanTheCalibrationsRecordingJump) {
  Measurement m = fixture_measurement();
  m.via = Via::Jump;
  m.probes = {{"work_fn", Via::Jump, "jump over 5 bytes", "", std::nullopt}};
  m.untraced = {untraced(1.0, 0.8)};
  m.traced = {traced(1.5, 0.8001, 0.0, 100'000)};  // 1 ns of CPU per hit; the wall time is noise
  OverheadResult r = analyze(m, fixture_calibration());
  EXPECT_EQ(r.mechanism, "jump");
  ASSERT_TRUE(r.prediction_error_percent);
  EXPECT_NEAR(*r.prediction_error_percent, 100 * ((1 + 100'000 * 2e-9) / 1.5 - 1), 1e-9);
  std::string all;
  for (const auto& e : r.explanations) all += e + "\n";
  EXPECT_NE(
      all.find("A jump hit cost 1.00 ns of CPU here against 2.00 ns in the calibration, whose "
               "jump probe writes a {TSC, id, arg} record per hit"),
      std::string::npos)
      << all;
}

// A traced run twice as fast as the untraced one (0.5x, the runs' noise on a busy machine) is
// not "within 10% of no slowdown": that line is said only when both figures are near 1.
TEST(OverheadModel, ASpeedupIsNotSaidToBeWithinTenPercentOfNoSlowdown) {
  Measurement m = fixture_measurement();
  m.via = Via::Jump;
  m.probes = {{"work_fn", Via::Jump, "jump over 5 bytes", "", std::nullopt}};
  m.untraced = {untraced(1.0, 0.8)};
  m.traced = {traced(0.5, 0.8001, 0.0, 100'000)};
  OverheadResult r = analyze(m, fixture_calibration());
  ASSERT_TRUE(r.slowdown);
  EXPECT_DOUBLE_EQ(r.slowdown->median, 0.5);
  std::string all;
  for (const auto& e : r.explanations) all += e + "\n";
  EXPECT_EQ(all.find("within 10% of no slowdown"), std::string::npos) << all;
}

// Attached, with jump windows as the reference: a closed-loop server that served 100,000
// requests/s with jumps in and 20,000/s with int3 probes in, and used less CPU for it.
TEST(OverheadModel, AttachedWithAJumpReferenceHasTheSlowdownOfItsRates) {
  Measurement m = fixture_measurement();
  m.attached = true;
  m.pid = 4242;
  m.command.clear();
  m.reference = Reference::Jump;
  m.reference_probes = {"work_fn"};
  RunRecord reference = traced(2.0, 1.0, 0.02, 200'000);  // 100,000/s on 0.5 CPU
  reference.reference_hits = 200'000;
  RunRecord tested = traced(2.0, 0.6, 0.4, 40'000);  // 20,000/s
  tested.reference_hits = 40'000;
  m.untraced = {reference};
  m.traced = {tested};
  OverheadResult r = analyze(m, fixture_calibration());
  ASSERT_TRUE(r.slowdown);
  EXPECT_DOUBLE_EQ(r.slowdown->median, 5);
  EXPECT_DOUBLE_EQ(r.event_rate_per_s, 100'000);      // the traced window's, sped up 5 times
  EXPECT_DOUBLE_EQ(r.event_rate_per_cpu_s, 200'000);  // over the reference's 0.5 CPU
  // The same work (40,000 events) took the reference 1.02 CPU-s x 0.2 = 0.204 CPU-s.
  EXPECT_NEAR(r.extra_cpu_percent.median, 100 * (1.0 - 0.204) / 0.204, 1e-9);
  EXPECT_NEAR(r.cpu_ns_per_hit.median, (1.0 - 0.204) * 1e9 / 40'000, 1e-6);
  EXPECT_NEAR(r.tracer_ns_per_hit, 10'000, 1e-6);
  EXPECT_NEAR(r.command_ns_per_hit, 10'000, 1e-6);  // 0.6 - 1.0 x 0.2 CPU-s
  ASSERT_TRUE(r.wall_ns_per_hit);
  EXPECT_NEAR(r.wall_ns_per_hit->median, 2.0 * (1 - 1.0 / 5) * 1e9 / 40'000, 1e-6);
  ASSERT_TRUE(r.reference_rate && r.traced_rate);
  EXPECT_DOUBLE_EQ(r.reference_rate->median, 100'000);
  EXPECT_DOUBLE_EQ(r.traced_rate->median, 20'000);
  EXPECT_EQ(r.error_basis, ErrorBasis::Slowdown);
  ASSERT_TRUE(r.prediction_error_percent);
  EXPECT_NEAR(*r.prediction_error_percent, 100 * (3.0 / 5 - 1), 1e-9);  // 1 + 100,000 x 20 µs
  ASSERT_EQ(r.cannot_know.size(), 3u);
  EXPECT_NE(r.cannot_know[0].find("jump probes at the same sites"), std::string::npos);
  for (const auto& e : r.explanations) {
    EXPECT_EQ(e.find("waited at every int3 stop"), std::string::npos) << e;
  }
}

// A second probe with no jump: the reference counts the work at the first alone.
TEST(OverheadModel, AttachedReferenceCountsTheWorkAtItsOwnProbesOnly) {
  Measurement m = fixture_measurement();
  m.attached = true;
  m.pid = 4242;
  m.reference = Reference::Jump;
  m.reference_probes = {"work_fn"};
  m.no_jump = {{"tiny_fn", "the function is shorter than a jump"}};
  m.probes.push_back({"tiny_fn", Via::Int3, "emulate 'ret'", "the function is shorter than a jump",
                      StepMethod::Emulate});
  RunRecord reference = traced(1.0, 0.5, 0.0, 1000);
  reference.reference_hits = 1000;
  RunRecord tested = traced(1.0, 0.5, 0.5, 1000);  // 500 at each probe
  tested.reference_hits = 500;
  tested.probe_hits = {500, 500};
  m.untraced = {reference};
  m.traced = {tested};
  OverheadResult r = analyze(m, fixture_calibration());
  ASSERT_TRUE(r.slowdown);
  EXPECT_DOUBLE_EQ(r.slowdown->median, 2);
  EXPECT_DOUBLE_EQ(r.event_rate_per_s, 2000);  // both probes' hits, untraced
  std::string notes;
  for (const auto& n : r.notes) notes += n + "\n";
  EXPECT_NE(notes.find("No jump fits tiny_fn (the function is shorter than a jump): the "
                       "reference windows leave it out"),
            std::string::npos)
      << notes;
}
