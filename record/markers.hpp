#pragma once
// USDT markers in a recording: which ones pair into calls, what their arguments are called, and
// the pairing itself.
//
// Pairs: PROVIDER:X__entry with PROVIDER:X__return, the DTrace convention that python
// (function__entry/function__return), ruby (method__entry/method__return), php and perl ship,
// when both are recorded (`-b 'usdt:python:function__*'`, or each by name). A marker without
// its partner, and every other marker (python:line, gc__start), is an instant.
//
// Pairing, per thread, nested: a return closes the innermost open entry of its pair whose
// string arguments are the return's (python's function__return gives the file and function of
// the frame it leaves, and the line it leaves from: the numbers are not compared). A return
// with no such entry is an orphan, counted and written as an instant, never a call: python 3.11
// fires function__return for a Python-to-Python call it runs inline but not function__entry.
// Entries above the one a return closes were left without their return (an exception, or a
// marker the program does not fire) and are unmatched (skipped); so is an entry still open when
// its thread exits or the recording ends. A call is never invented.
//
// Arguments: the first kMaxArgs of a marker's (<sys/sdt.h> allows 12; python's have 3).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/names.hpp"
#include "record/output.hpp"

namespace probecost::record {

// The arguments of the marker PROVIDER:NAME whose note's specs are `specs` ("8@%rbp 8@%r12
// -4@%eax"): text for each unsigned 8-byte one; python's named as CPython's documentation
// names them (file, name, line; generation; module, found; event), others arg0, arg1, ...
std::vector<MarkerArg> marker_args(const std::string& provider, const std::string& name,
                                   const std::string& specs);

// "instant", "entry", "return" ("" for none).
inline constexpr auto kMarkerRoleNames = name_table<MarkerRole>({{MarkerRole::none, ""},
                                                                 {MarkerRole::instant, "instant"},
                                                                 {MarkerRole::entry, "entry"},
                                                                 {MarkerRole::exit, "return"}});
const char* marker_role_name(MarkerRole role);

// Each marker of `probes` (marker != none) an entry, an exit or an instant, as above.
void assign_marker_roles(std::vector<ProbeInfo>& probes);

// What names an entry marker's call: its argument called "name", else its first text argument;
// -1: none (the call is named by the marker, less its "__entry").
int marker_name_arg(const ProbeInfo& p);
// "python:function" for python:function__entry and python:function__return.
std::string marker_pair(const ProbeInfo& p);

class MarkerPairing {
 public:
  static constexpr std::size_t kMaxDepth = std::size_t{1} << 16;  // open entries per thread

  MarkerPairing(const RunInfo& run, Output& out);
  // A marker event: an instant goes out at once; an entry waits; a return closes or is an
  // orphan.
  void add(const Event& e);
  void thread_exited(std::int32_t pid, std::int32_t tid);
  void finish();
  std::size_t open_entries() const;

 private:
  bool same_key(const Event& entry, const Event& ret) const;
  void close(std::vector<Event>& open, const Event& ret);

  Output& out_;
  std::vector<MarkerRole> role_;
  std::vector<int> pair_;           // per probe: its pair's index, -1 for none
  std::vector<std::uint8_t> text_;  // per probe: which arguments are text
  std::unordered_map<std::uint64_t, std::vector<Event>> open_;  // per thread, innermost last
};

}  // namespace probecost::record
