#pragma once
// Where an interval's time goes, phase by phase: the wall time of each (what the process held
// meanwhile felt) and probecost's own CPU time in it (the work, apart from the time a busy
// machine kept probecost off its CPU). A phase named again adds to the first one's figures.
#include <string>
#include <vector>

#include "common/clock.hpp"

namespace probecost {

struct Phase {
  std::string name;
  double wall_s = 0, cpu_s = 0;
};

// `phase` added to the one of its name in `into`, or appended.
inline Phase& add_phase(std::vector<Phase>& into, const Phase& phase) {
  for (auto& p : into) {
    if (p.name == phase.name) {
      p.wall_s += phase.wall_s;
      p.cpu_s += phase.cpu_s;
      return p;
    }
  }
  return into.emplace_back(phase);
}

class PhaseClock {
 public:
  // From now on: the next mark() ends the first phase here.
  void start() {
    last_wall_ = now_s();
    last_cpu_ = thread_cpu_s();
    running_ = true;
  }
  // The phase that ends now is `name`; the next one starts.
  void mark(const std::string& name) {
    if (!running_) return;
    double wall = now_s(), cpu = thread_cpu_s();
    add_phase(phases_, {name, wall - last_wall_, cpu - last_cpu_});
    last_wall_ = wall;
    last_cpu_ = cpu;
  }
  // Marks `name` and stops: marks after this are ignored until the next start().
  void stop(const std::string& name) {
    mark(name);
    running_ = false;
  }
  bool running() const { return running_; }
  const std::vector<Phase>& phases() const { return phases_; }

 private:
  std::vector<Phase> phases_;
  double last_wall_ = 0, last_cpu_ = 0;
  bool running_ = false;
};

}  // namespace probecost
