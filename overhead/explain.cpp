// Why a measurement and its prediction differ, from the evidence the runs and the calibration
// give; and what a watcher of a running process cannot know.
#include "overhead/explain.hpp"

#include <algorithm>
#include <cmath>

#include "common/format.hpp"

namespace probecost {

double ratio_spread(const Summary& s) {
  return s.median != 0 ? (s.max - s.min) / std::fabs(s.median) : 0;
}

namespace {

// The causes explain() looks for, each from its own evidence. The int3 ones apply only where a
// probe stopped threads: a jump never stops one.
class Why {
 public:
  explicit Why(const OverheadResult& r)
      : r_(r),
        m_(r.m),
        c_(r.calibration),
        row_(r.used_row()),
        int3_(r.uses_int3()),
        here_(placement_name(m_.placement)),
        it_(m_.attached ? "the process" : "the command") {
    if (r.cpu_samples) {
      looks_ = "probecost ran on another CPU than " + it_ + " at " +
               std::to_string(r.cpu_samples_apart) + " of " + std::to_string(r.cpu_samples) +
               " looks (every 100 ms)";
    }
  }

  std::vector<std::string> all() {
    if (int3_) {
      placement();
      waits();
      sides();
      step_over();
      busy_with_threads();
      waited_at_stops();
    }
    jump_counts_only();
    load();
    noise();
    if (why_.empty()) {
      why_.push_back(int3_ ? "None of the causes probecost looks for shows (placement, waits "
                             "across CPUs, the command's side of a hit, step-over, load, noise, "
                             "threads)."
                           : "None of the causes probecost looks for shows (load, noise).");
    }
    return why_;
  }

 private:
  void placement() {
    if (c_.placement.empty() || c_.placement_id == m_.placement) return;
    std::string cost =
        row_ ? " Here a hit cost " + human_ns(r_.cpu_ns_per_hit.median) + " of CPU" +
                   (r_.wall_ns_per_hit
                        ? " and " + human_ns(r_.wall_ns_per_hit->median) + " of wall time"
                        : std::string()) +
                   ", in the calibration " + human_ns(row_->cpu_ns_per_hit) + " and " +
                   human_ns(row_->wall_ns_per_hit)
             : std::string();
    why_.push_back("The calibration was measured at placement " + c_.placement + ", this run at " +
                   here_ + ": for int3 probes where the tracer and " + it_ +
                   " run decides the cost (a wake-up across CPUs costs µs to tens of µs in a "
                   "virtual machine, in CPU time as well as in waiting)." +
                   cost + (looks_.empty() ? "" : "; " + looks_) + ". Calibrate at placement " +
                   here_ + " (the built-in calibration does).");
  }

  void waits() {
    if (!r_.wall_ns_per_hit || r_.cpu_ns_per_hit.median <= 0) return;
    double wall = r_.wall_ns_per_hit->median, cpu = r_.cpu_ns_per_hit.median;
    double cal_ratio =
        row_ && row_->cpu_ns_per_hit > 0 ? row_->wall_ns_per_hit / row_->cpu_ns_per_hit : 0;
    if (wall > 1.25 * cpu && wall - cpu > 1000) {
      why_.push_back("A hit took " + human_ns(wall) + " of wall time here but " + human_ns(cpu) +
                     " of CPU: " + human_ns(wall - cpu) +
                     " per hit ran on no CPU, which is what waiting for wake-ups across CPUs "
                     "looks like (" +
                     looks_ + "; probecost moved between CPUs " +
                     num(r_.tracer_migrations_per_1000_hits, 1) + " times per 1000 hits)" +
                     (cal_ratio > 0 ? "; the calibration's hits took " + num(cal_ratio, 2) +
                                          " times their CPU in wall time"
                                    : "") +
                     ".");
    } else if (cal_ratio > 1.25 && wall < 1.1 * cpu) {
      why_.push_back("The calibration's hits waited on wake-ups across CPUs (wall " +
                     human_ns(row_->wall_ns_per_hit) + " for " + human_ns(row_->cpu_ns_per_hit) +
                     " of CPU) and this run's did not (wall " + human_ns(wall) + " for " +
                     human_ns(cpu) + "): " + (looks_.empty() ? "the scheduler" : looks_) + ".");
    }
  }

  // probecost's side of a hit and the command's, against the calibration's.
  void sides() {
    if (!row_ || row_->tracer_cpu_ns_per_hit <= 0 || !r_.hits) return;
    double cal_tracer = row_->tracer_cpu_ns_per_hit;
    double cal_command = row_->cpu_ns_per_hit - cal_tracer;
    double tracer_ratio = r_.tracer_ns_per_hit / cal_tracer;
    double command_ratio = cal_command > 0 ? r_.command_ns_per_hit / cal_command : 0;
    bool both_up = tracer_ratio > 1.15 && command_ratio > 1.15;
    bool both_down = tracer_ratio < 1 / 1.15 && command_ratio < 1 / 1.15;
    std::string sides = "probecost " + human_ns(r_.tracer_ns_per_hit) + " here against " +
                        human_ns(cal_tracer) + " in the calibration, " + it_ + " " +
                        human_ns(r_.command_ns_per_hit) + " against " + human_ns(cal_command);
    if (c_.placement_id == m_.placement && (both_up || both_down)) {
      why_.push_back(
          std::string("Both sides of a hit cost ") + (both_up ? "more" : "less") +
          " here than in the calibration (" + sides +
          "), at the same placement: the same trap, stop and step-over ran at another "
          "speed, so the machine itself was faster or slower at one of the two times. "
          "Trap costs in a virtual machine drift with what else runs on the host and "
          "here; the calibration is " +
          num(c_.age_s / 60, 0) + " min old" +
          (c_.load_1min >= 0 ? " (load average " + num(c_.load_1min, 2) + " then)" : "") +
          ". --recalibrate measures it again.");
      return;
    }
    if (command_ratio > 1.5 && r_.command_ns_per_hit - cal_command > 1000) {
      why_.push_back("The command's side of a hit cost more than in the calibration (" + sides +
                     "): besides the trap itself, every stop puts the kernel and probecost on "
                     "the CPU, which evicts the command's caches and TLB entries, so its own "
                     "work between hits runs slower (the calibration's loop has almost no "
                     "working set).");
    }
    if (tracer_ratio > 1.5 || tracer_ratio < 1 / 1.5) {
      why_.push_back("probecost's side of a hit cost " + human_ns(r_.tracer_ns_per_hit) +
                     " of CPU against " + human_ns(cal_tracer) + " in the calibration.");
    }
  }

  void step_over() {
    if (!row_ || row_->step_over.empty()) return;
    for (const auto& p : m_.probes) {
      if (p.via == Via::Int3 && p.method != row_->method) {
        why_.push_back(p.spec + " is stepped over by '" + p.how + "', the calibration's site by '" +
                       row_->step_over +
                       "': the two cost differently (probecost bench step-over).");
      }
    }
  }

  void busy_with_threads() {
    if (r_.untraced_wall.median <= 0 || r_.untraced_cpu.median <= 1.2 * r_.untraced_wall.median)
      return;
    why_.push_back("The command keeps " + num(r_.untraced_cpu.median / r_.untraced_wall.median, 1) +
                   " CPUs busy: hits in its threads queue for the one tracer, while the "
                   "calibration's single thread never waits for it.");
  }

  // Without a jump reference only CPU is compared: a process that waits at every int3 stop
  // does less work traced, and then uses less CPU for it.
  void waited_at_stops() {
    if (!m_.attached || m_.reference != Reference::Untraced) return;
    double busy_untraced =
        r_.untraced_wall.median > 0 ? r_.untraced_cpu.median / r_.untraced_wall.median : 0;
    double busy_traced =
        r_.traced_wall.median > 0 ? r_.traced_cpu.median / r_.traced_wall.median : 0;
    if (busy_untraced < 0.9 || busy_traced >= 0.9 * busy_untraced) return;
    why_.push_back("The process was busy untraced (" + num(busy_untraced, 2) +
                   " CPUs) and used less while traced (" + num(busy_traced, 2) +
                   "): its threads waited at every int3 stop, so it did less of its work in the "
                   "traced window. Its events then come slower when traced, the rate above is "
                   "lower than its untraced rate, and the extra CPU understates the cost: with no "
                   "jump at these sites to count its work by, the cost shows as work not done, "
                   "which a watcher cannot measure.");
  }

  // compare's jump row writes a record per hit (as the marker does); a trace's jump probes only
  // count, unless --events.
  void jump_counts_only() {
    bool jump_only = r_.mechanisms_used == std::vector<MechanismId>{MechanismId::Jump};
    if (!jump_only || !row_ || r_.cpu_ns_per_hit.median >= row_->cpu_ns_per_hit) return;
    why_.push_back(
        "A jump hit cost " + human_ns(r_.cpu_ns_per_hit.median) + " of CPU here against " +
        human_ns(row_->cpu_ns_per_hit) +
        " in the calibration, whose jump probe writes a {TSC, id, arg} record per hit; these "
        "only count hits, so the prediction is an upper bound" +
        (row_->wall_ns_per_hit > 1.25 * row_->cpu_ns_per_hit
             ? ", and its slowdown carries the calibration's wall time per hit (" +
                   human_ns(row_->wall_ns_per_hit) + ", " +
                   num(row_->wall_ns_per_hit / row_->cpu_ns_per_hit, 1) +
                   " times its CPU: waits for a CPU)"
             : std::string()) +
        ".");
  }

  // The load average counts probecost and the command themselves; what other processes used
  // is the machine's busy time (/proc/stat) minus ours.
  void load() {
    if (m_.others_cpu_share > 0.1) {
      why_.push_back("Other processes used " + num(100 * m_.others_cpu_share, 0) + "% of the " +
                     std::to_string(m_.cpus_online) + " CPUs' time during the runs (load average " +
                     num(std::max(m_.load_before[0], m_.load_after[0]), 2) +
                     "), so they took turns with probecost and " + it_ +
                     (c_.others_cpu_share >= 0
                          ? " (during the calibration: " + num(100 * c_.others_cpu_share, 0) + "%)"
                          : std::string()) +
                     ".");
    } else if (c_.others_cpu_share > 0.1) {
      why_.push_back("Other processes used " + num(100 * c_.others_cpu_share, 0) +
                     "% of the CPUs' time during the calibration (" +
                     num(100 * std::max(0.0, m_.others_cpu_share), 0) +
                     "% during these runs): --recalibrate when the machine is quiet.");
    }
  }

  void noise() {
    if (r_.slowdown && ratio_spread(*r_.slowdown) > 0.2) {
      why_.push_back("The runs themselves differ: the slowdown went from " +
                     num(r_.slowdown->min, 2) + " to " + num(r_.slowdown->max, 2) + ".");
    }
    if (const Prediction* p = r_.used(); p && r_.slowdown) {
      // Near 1 on both sides: a traced run faster than untraced (0.5x) is noise too, but
      // not "within 10%".
      auto near_one = [](double x) { return std::abs(x - 1) < 0.1; };
      if (near_one(r_.slowdown->median) && near_one(p->slowdown)) {
        why_.push_back(
            "Both are within 10% of no slowdown at all: the error is the runs' own noise.");
      }
    }
  }

  const OverheadResult& r_;
  const Measurement& m_;
  const Calibration& c_;
  const CalibrationRow* row_;
  bool int3_;
  std::string here_, it_, looks_;
  std::vector<std::string> why_;
};

}  // namespace

std::vector<std::string> explain(const OverheadResult& r) {
  return Why(r).all();
}

std::vector<std::string> what_cannot_be_known(const Measurement& m) {
  std::string pid = std::to_string(m.pid);
  if (m.reference == Reference::Jump) {
    return {"probecost did not start process " + pid +
                ": what it does with no probe at all is not measured. The reference is the "
                "process with jump probes at the same sites, whose hits cost a few ns each (the "
                "calibration's jump row): its rate of events is the untraced rate less that.",
            "The process's work may change by itself from one window to the next: the windows "
            "alternate (--repeat pairs), and the slowdown's min .. max shows how much they differ.",
            "The slowdown is that of the process's events at the probed sites: it is the slowdown "
            "of its work when those events follow the work (a call per request, per allocation)."};
  }
  std::vector<std::string> out = {
      "probecost did not start process " + pid +
          ": it cannot know what the process would "
          "have done in the traced seconds without probes, whether its work changed by itself "
          "between the two windows, or what it will do next.",
      "Its progress is only its CPU time and the hits: no jump fits a probed site, so the "
      "untraced window has no hits to count, and the event rate is the traced window's. That is "
      "the untraced rate only when events come at a pace tracing does not change (a server under "
      "a steady load); a process busy all the time makes fewer events per second when traced, "
      "and then its untraced rate and the predictions are higher than shown.",
      "Without a count of its work, no slowdown is measured, and the prediction error is that of "
      "the extra CPU."};
  return out;
}

}  // namespace probecost
