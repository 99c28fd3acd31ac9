#pragma once
// What `probecost record`'s tracer side hands to its outputs: decoded events and the run's
// metadata. Events arrive in per-thread order (each thread's events in time order) while threads
// interleave arbitrarily; the outputs write as they go and keep no event stream in memory.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/tsc.hpp"

namespace probecost::record {

inline constexpr int kMaxArgs = 6;  // the integer argument registers: rdi rsi rdx rcx r8 r9

enum class EventKind : std::uint8_t {
  entry,  // the function's first instruction ran; args valid
  exit,   // it left by `ret` or by a tail call (`jmp` to another function); ret holds rax
  // The tracer saw this frame left without a return (a longjmp or an exception's unwinding past
  // it) at tsc. Optional: without it such a frame is closed, unmatched, when an outer frame of
  // the same thread returns.
  unwound,
  // A USDT marker's hit (probe: a ProbeInfo with `marker` set): its arguments in args, those
  // whose bit is set in Event::text the ids of strings (Output::string). Entry and return
  // markers are paired into calls (marker_pairing.hpp), the others are instants.
  marker,
};

// Why an entry of `record --stacks` has no stack (Event::no_stack).
enum class StackMissing : std::uint8_t {
  none,            // it has one, or stacks were not asked for
  lost,            // no snapshot of it was kept: its ring was full (the unwinding fell behind)
  unknown_thread,  // not copied: a thread whose stack probecost could not bound (a raw clone)
  off_stack,       // not copied: rsp off its thread's stack (a sigaltstack, a coroutine)
  direction_flag,  // not copied: DF set at the entry (the copy is a rep movsb)
  not_unwound,     // copied, but the unwinder found no frame in it
  int3,            // an int3 serves the entry, and the process has no snapshot buffer
};
// "lost: ...", "not copied: ...": what a trace says instead of the stack.
const char* stack_missing_text(StackMissing why);

struct Event {
  EventKind kind = EventKind::entry;
  std::uint32_t probe = 0;  // index into RunInfo::probes
  std::int32_t pid = 0;
  std::int32_t tid = 0;
  std::uint64_t tsc = 0;
  // The address of the frame's return-address slot: rsp at the function's first instruction,
  // and the same rsp at an exit site (before its ret or tail jmp). With it an exit is paired with
  // exactly its own entry, even in recursion whose inner frames were unwound; 0 when unknown, and
  // then an exit pairs with the innermost open entry of its probe.
  std::uint64_t sp = 0;
  std::array<std::uint64_t, kMaxArgs> args{};  // entry: the first RunInfo::arg_count are valid
  std::uint64_t ret = 0;                       // exit: rax
  // An entry of `record --stacks`: its stack (Output::stack named its frames before), 0 for
  // none, and why none.
  std::uint32_t stack = 0;
  StackMissing no_stack = StackMissing::none;
  std::uint8_t text = 0;  // marker: bit i set when args[i] is a string's id
};

// A USDT marker's part in the recording (record/markers.hpp says which is which).
enum class MarkerRole : std::uint8_t {
  none,     // not a marker: a function's entry and exits
  instant,  // a point in time: python:line, gc__start
  entry,    // PROVIDER:X__entry, recorded with its PROVIDER:X__return
  exit,     // PROVIDER:X__return, recorded with its PROVIDER:X__entry
};

// A USDT marker's argument: a number, or (8 bytes unsigned: a char * in <sys/sdt.h>'s
// notes) a string copied at the hit, or the pointer's value as "0x..." text when it points at
// no text.
struct MarkerArg {
  std::string name;  // "file", "name", "line" (python's), else "arg0", "arg1", ...
  bool text = false;
};

struct ProbeInfo {
  ProbeInfo() = default;
  ProbeInfo(std::string spec_, std::string function_, std::string module_, std::uint64_t address_)
      : spec(std::move(spec_)),
        function(std::move(function_)),
        module(std::move(module_)),
        address(address_) {}
  std::string spec;      // as the user gave it: "middle", "libc.so.6:malloc"
  std::string function;  // demangled symbol: "middle(long)", "ns::Klass::method()"; a USDT
                         // marker's PROVIDER:NAME ("python:function__entry")
  std::string module;    // "libc.so.6", or the executable's name
  std::uint64_t address = 0;
  // USDT markers only (see MarkerRole).
  MarkerRole marker = MarkerRole::none;
  std::vector<MarkerArg> marker_args;
};

struct RunInfo {
  std::vector<ProbeInfo> probes;
  int arg_count = 0;  // --args N: how many of Event::args are valid, 0 to kMaxArgs
  tsc::Calibration clock;
  bool stacks = false;  // --stacks: entries carry a stack (Event::stack)
};

// Records the tracer could not read (its ring overwrote them before they were drained).
// probe is kAnyProbe when the ring does not say whose they were; tid 0 when it does not say
// whose thread. tsc: when they were counted (a trace shows the loss there). count: records;
// entries and exits: of them, a function's entries (calls lost) and exits (returns lost), when
// the tracer knows (the rest: markers' hits, or a ring that does not say).
inline constexpr std::uint32_t kAnyProbe = UINT32_MAX;
struct Lost {
  std::int32_t pid = 0;
  std::int32_t tid = 0;
  std::uint32_t probe = kAnyProbe;
  std::uint64_t count = 0;
  std::uint64_t tsc = 0;
  std::uint64_t entries = 0, exits = 0;
};

}  // namespace probecost::record
