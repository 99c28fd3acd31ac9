#pragma once
// Error: the project's exception for a failure the user must hear about. It is caught once, in
// main, which prints what() and exits non-zero. Its refinements tell a catcher what it may do
// about one: UsageError (bad input, where it is parsed; CannotTrace and CannotProbe, in tracer/,
// are the engine's refusals: see docs/layout.md "Who says exit 2"), SiteOccupied (an address
// holds an int3 already), and seccomp::Refused (tracer/os/seccomp.hpp: a filter would punish).
// Expected outcomes (a tracee that has exited) are return values, not exceptions; the tracer's
// TaskGone (tracer/core/task.hpp), a thread gone from under the hit path, is not an Error and never
// reaches main: TracedProcess::unless_gone turns it into Outcome::Gone.
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace probecost {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}

  // what: ": " strerror(errno)
  static Error from_errno(const std::string& what, int err = errno) {
    return Error(what + ": " + std::strerror(err));
  }
};

// Bad input, found where it is parsed (unknown mechanism, malformed rate or probe spec): exit 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

// A breakpoint address that holds int3 already: the program's own, another debugger's, or one
// a probecost that died left behind (see `probecost restore`).
class SiteOccupied : public Error {
 public:
  explicit SiteOccupied(const std::string& what) : Error(what) {}
};

}  // namespace probecost
