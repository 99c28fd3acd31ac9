#pragma once
// The report of `probecost trace`: text (the table, processes, how each probe is in, CPU
// figures), JSON, CSV, and folded stacks.
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "trace/trace.hpp"

namespace probecost {

nlohmann::json trace_json(const TraceReport& r);
// `top`: stacks printed per probe; `verbose`: hits by probe and thread, and rows of other
// processes without a hit.
void write_trace_text(std::ostream& out, const TraceReport& r, unsigned top, bool verbose);
// "held stopped N ms, wall (probecost's CPU):" and each phase of the hold (-v).
void write_held_phases(std::ostream& out, const TraceReport& r);
// One row per probe, process and image, most hits first; numbers in fixed notation.
void write_trace_csv(std::ostream& out, const TraceReport& r);
// --folded: flamegraph.pl / speedscope / inferno input, frames by function ("main"), or with
// `offsets` as the report prints them ("main+0x1f in prog": --folded-offsets).
std::string trace_folded_stacks(const TraceReport& r, bool offsets = false);

}  // namespace probecost
