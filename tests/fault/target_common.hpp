#pragma once
// What every fault-injection target shares: the probed function, a SIGTRAP handler that
// catches a stray trap instead of dying of it, the self-checks, and the talk with the driver.
//
// The driver talks to a target on two channels: commands on stdin (one per line) and the
// target's own lines on a control fd (--ctl-fd N, default stdout), which a launched target
// inherits through probecost. Every target says "ready PID" once its threads run, and
// "end KEY=VALUE ..." just before it exits: calls (of probe_fn in this address space), bad
// (results that were wrong), traps (SIGTRAPs its handler caught, with trap_code and
// trap_at of the last), text (ok, or the first byte that differs from the ELF file), sigtrap
// (own: its SIGTRAP handler is its own again; other; traced).
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <string>

// The probed function: counts its calls and returns a value the caller checks.
extern "C" std::uint64_t probe_fn(std::uint64_t x);

namespace fault {

inline constexpr std::uint64_t expected_result(std::uint64_t x) {
  return x * 2654435761u + 1;
}

extern std::atomic<std::uint64_t> g_calls;  // calls of probe_fn in this address space
extern std::atomic<std::uint64_t> g_bad;    // wrong results seen by callers

// Exit code of a target whose handler met an int3 still in its text: it cannot go on.
inline constexpr int kExitInt3Left = 86;

// Parses --ctl-fd and installs the SIGTRAP handler. Call first in main.
void init(int argc, char** argv);
// The SIGTRAP handler the target itself installed (init()'s, unless it installs another): the
// end line says whether it is still the disposition ("sigtrap=own") once nobody traces it.
void expect_sigtrap_handler(void (*handler)(int, siginfo_t*, void*));
// A site whose first byte a tracer may replace: a SIGTRAP at site+1 with the byte back in place
// is rewound onto it (the program goes on, the trap is counted).
void register_site(const void* site);
// Calls probe_fn and checks its result.
void call_probe(std::uint64_t x);
// One line on the control fd (a '\n' is added).
void say(const std::string& line);
// "end calls=... bad=... traps=... text=..." with `extra` appended.
void say_end(const std::string& extra = "");
// The value of "--name VALUE" in argv, or `fallback`.
std::string option(int argc, char** argv, const std::string& name, const std::string& fallback);
bool flag(int argc, char** argv, const std::string& name);
// A seeded pseudo-random number in [0, n): targets get their seed from the driver (--seed).
std::uint64_t random_below(std::uint64_t n);

}  // namespace fault
