#include "tracer/core/event_loop.hpp"

#include "common/clock.hpp"
#include "tracer/os/ticker.hpp"

namespace probecost {

bool deadline_reached(double deadline, bool& armed) {
  if (deadline <= 0) return false;
  double left = deadline - now_s();  // CLOCK_MONOTONIC, from the vDSO: ~20 ns, no system call
  if (left <= 0) return true;
  if (left < Ticker::kPeriod && !armed) {
    Ticker::next_tick_within(left);  // once: a system call
    armed = true;
  }
  return false;
}

std::optional<RunEnd> EventLoop::look_around() {
  if (stop_requested()) return RunEnd::Interrupted;
  if (deadline_reached(deadline_, deadline_armed_)) return RunEnd::Deadline;
  if (tick_requested().exchange(false) && on_tick_ && on_tick_()) return RunEnd::Tick;
  if (between_events_) {
    if (auto end = between_events_()) return end;
  } else {
    for (const auto& m : family_.members()) {
      if (m->exec_ended()) return RunEnd::Exec;
    }
  }
  if (!family_.any_alive()) return RunEnd::ProcessEnded;
  return std::nullopt;
}

RunEnd EventLoop::run() {
  for (;;) {
    if (auto end = look_around()) return *end;
    auto ev = family_.next_event();
    if (!ev) {
      if (family_.none_left()) return RunEnd::ProcessEnded;
      continue;  // a signal: the flags are looked at above
    }
    Session* session = session_of_(*ev->process);
    if (!session || !session->handle(ev->event)) continue;
    if (session->hit() && session->process().alive() && stop_after_hit_ && stop_after_hit_()) {
      return RunEnd::Predicate;
    }
    session->resume_after(ev->event);
  }
}

RunEnd run_session(Family& family, Session& session, std::function<bool()> stop_after_hit) {
  EventLoop loop(family, [&session](TracedProcess& p) {
    return &p == &session.process() ? &session : nullptr;
  });
  loop.set_stop_after_hit(std::move(stop_after_hit));
  session.start();
  return loop.run();
}

}  // namespace probecost
