#include "tracer/os/fault_plan.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace probecost::fault_plan {

// The hit (or stage) to die at, and the calls after it.
struct Plan {
  std::uint64_t hit = 0, calls = 0;
  std::uint64_t hits_seen = 0, countdown = 0;
  std::string stage;  // "attach", "detach", ...; empty: a hit
  // A death inside an injected call (between the registers lent and given back) says so first:
  // the window the README names (issue 23 item 8), which tests count apart.
  bool injecting = false;
};

namespace {

Plan parse(const char* v) {
  Plan p;
  if (!v) return p;
  unsigned long long k = 0, n = 0;
  char stage[8] = "";
  if (std::sscanf(v, "%6[a-z]+%llu", stage, &n) == 2 && n > 0 &&
      (std::strcmp(stage, "attach") == 0 || std::strcmp(stage, "detach") == 0 ||
       std::strcmp(stage, "runout") == 0 || std::strcmp(stage, "warm") == 0 ||
       std::strcmp(stage, "inloop") == 0 || std::strcmp(stage, "ifunc") == 0)) {
    p.stage = stage;
    p.calls = n;
    if (p.stage == "attach") p.countdown = n;  // from the first call on
  } else if (std::sscanf(v, "%llu+%llu", &k, &n) >= 1) {
    p.hit = k;
    p.calls = n;
  }
  return p;
}

// The plan, or null when it can never fire (no hit and no stage: every call would return).
Plan* arm(const char* v, bool injecting) {
  static Plan plan;
  plan = parse(v);
  plan.injecting = injecting;
  return plan.hit || !plan.stage.empty() ? &plan : nullptr;
}

}  // namespace

// Read once before main: probecost never sets the variable itself.
Plan* armed = arm(std::getenv("PROBECOST_DIE_AT_HIT"), false);

namespace detail {

void before_call(Plan& p) {
  if (!p.countdown || --p.countdown != 0) return;
  if (p.injecting) {
    const char line[] = "probecost: PROBECOST_DIE_AT_HIT: dying inside an injected call\n";
    [[maybe_unused]] auto n = ::write(2, line, sizeof line - 1);
  }
  ::raise(SIGKILL);
}

void at_hit(Plan& p) {
  if (!p.hit || ++p.hits_seen != p.hit) return;
  if (p.calls == 0) ::raise(SIGKILL);
  p.countdown = p.calls;
}

void at_stage(Plan& p, const char* stage) {
  if (p.stage.empty()) return;
  if ((p.stage == "attach" || p.stage == "ifunc") && std::strcmp(stage, "attached") == 0 &&
      p.countdown) {
    // The attach took fewer calls than asked: said, for the tests that walk it call by call.
    std::fprintf(stderr, "probecost: PROBECOST_DIE_AT_HIT=%s+%llu: the attach is over\n",
                 p.stage.c_str(), static_cast<unsigned long long>(p.calls));
    p.countdown = 0;
  } else if (p.stage != "attach" && p.stage == stage) {
    p.countdown = p.calls;  // detach, runout, warm, inloop, ifunc
  }
}

void set_injecting(Plan& p, bool on) {
  p.injecting = on;
}

}  // namespace detail

void plan_death(const char* plan) {
  armed = arm(plan, armed && armed->injecting);
}

}  // namespace probecost::fault_plan
