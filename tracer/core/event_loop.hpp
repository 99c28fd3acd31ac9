#pragma once
// The one event loop of the tracer: it takes the family's events one by one and hands each to
// the Session of the process it belongs to, which handles it; then the thread goes on. Between
// events it looks at the flags probecost's signal handlers set, the deadline and the tick, so
// a process that hits a probe without pause cannot keep it from seeing them.
//
// Tracing one process is a family of one with one Session (run_session); a trace of several
// runs the same loop over every process it follows, with a Session each.
#include <functional>
#include <optional>

#include "tracer/core/family.hpp"
#include "tracer/core/session.hpp"

namespace probecost {

enum class RunEnd { ProcessEnded, Exec, Interrupted, Predicate, Tick, Deadline };

// True once CLOCK_MONOTONIC reaches `deadline` (seconds; 0: none). Close to it, the next tick
// is brought forward once (`armed`), so that a waiting loop wakes up in time.
bool deadline_reached(double deadline, bool& armed);

class EventLoop {
 public:
  // The Session that handles a member's events; nullptr: the event is not handled.
  using SessionOf = std::function<Session*(TracedProcess&)>;
  EventLoop(Family& family, SessionOf session_of)
      : family_(family), session_of_(std::move(session_of)) {}

  // Ends the run with RunEnd::Deadline once CLOCK_MONOTONIC reaches `seconds`.
  void set_deadline(double monotonic_seconds) { deadline_ = monotonic_seconds; }
  // Called at every tick (100 ms); true ends the run (RunEnd::Tick).
  void set_on_tick(std::function<bool()> f) { on_tick_ = std::move(f); }
  // Called after a hit with the hitting thread still stopped, already past the site; true
  // ends the run there (RunEnd::Predicate).
  void set_stop_after_hit(std::function<bool()> f) { stop_after_hit_ = std::move(f); }
  // Called before every wait, to settle what the events left: new members, exec'd ones. An
  // end ends the run. Without it, a member that exec'd ends the run (RunEnd::Exec).
  void set_between_events(std::function<std::optional<RunEnd>()> f) {
    between_events_ = std::move(f);
  }

  // Until every member has ended, stop_requested(), or one of the ends above.
  RunEnd run();

 private:
  std::optional<RunEnd> look_around();

  Family& family_;
  SessionOf session_of_;
  double deadline_ = 0;
  bool deadline_armed_ = false;
  std::function<bool()> on_tick_;
  std::function<bool()> stop_after_hit_;
  std::function<std::optional<RunEnd>()> between_events_;
};

// A family of one and its Session: starts the session and runs the loop until the process
// ends or execs, a stop request, or `stop_after_hit` returns true after a hit.
RunEnd run_session(Family& family, Session& session,
                   std::function<bool()> stop_after_hit = nullptr);

}  // namespace probecost
