#pragma once
// Test fault injection, the one seam: PROBECOST_DIE_AT_HIT in the environment makes probecost
// SIGKILL itself at a chosen point, so that the fault tests (tests/fault/test_sigkill.cpp,
// tests/fault/record_death.cpp, tests/trace/test_record_warm_death.cpp) can check that a death
// there leaves the traced process whole. Without a plan `armed` is null, and each call below is
// an inlined load and a branch not taken: the hit path and the counted system calls carry no
// call into test code.
//
// The plans:
// - K+N: right before the N-th system call on a tracee after the K-th hit counted (N = 0: at
//   once, with the thread stopped at the hit). The hit path calls at_hit() once per hit.
// - attach+N: right before the N-th system call on a tracee from the start (the seize's
//   first); if the attach is over first (at_stage("attached"): every thread let run), a line
//   on stderr says so and nothing dies.
// - detach+N: the N-th call from at_stage("detach") (letting go of the processes).
// - runout+N: from at_stage("runout") (the detach's threads caught in a trampoline, brought
//   out).
// - warm+N: from at_stage("warm") (the call buffer mapped in the process, about to be written
//   through).
// - inloop+N: from at_stage("inloop") (RemoteCalls::run_code's code, the warm loop, about to
//   be run by a thread: +2 dies with the thread's registers set for it:
//   tests/trace/test_record_warm_death.cpp).
// - ifunc+N: from at_stage("ifunc") (an IFUNC resolver about to be called in the tracee; the
//   attach's end is said as for attach+N).
// A death inside an injected call (set_injecting) is said on stderr first.

namespace probecost::fault_plan {

struct Plan;  // fault_plan.cpp

// The plan read from PROBECOST_DIE_AT_HIT at start (or given by plan_death); null without one.
extern Plan* armed;

namespace detail {
void before_call(Plan& plan);
void at_hit(Plan& plan);
void at_stage(Plan& plan, const char* stage);
void set_injecting(Plan& plan, bool on);
}  // namespace detail

// Before every system call on a tracee (tracer/os/syscalls.hpp's wrappers, ProcMemory).
inline void before_call() {
  if (armed) [[unlikely]]
    detail::before_call(*armed);
}

inline void at_hit() {
  if (armed) [[unlikely]]
    detail::at_hit(*armed);
}

inline void at_stage(const char* stage) {
  if (armed) [[unlikely]]
    detail::at_stage(*armed, stage);
}

// From an injected call's start (true) to its end (false): the registers lent to the thread.
inline void set_injecting(bool on) {
  if (armed) [[unlikely]]
    detail::set_injecting(*armed, on);
}

// The same plan, given by a test that traces from a process of its own (fork, no exec).
void plan_death(const char* plan);

}  // namespace probecost::fault_plan
