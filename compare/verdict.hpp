#pragma once
// compare's verdict: what the costliest mechanism takes of a CPU at the rate asked (the 2006
// mail's sentence), and for each use of a probe (counting hits, recording events, taking
// stacks) the cheapest mechanism that serves it, compiled into the program or put into a
// running one.
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "compare/compare.hpp"

namespace probecost {

// What a probe is for. Each use is served by the mechanisms whose measured cost includes what
// the use needs: any probe counts; the marker and the jump write a record per hit; a stack
// needs the thread stopped (an int3), and its unwinding is not in the figure.
enum class ProbePurpose { Counting, Recording, Stacks };

struct Cheapest {
  ProbePurpose purpose;
  const MechanismResult* overall = nullptr;  // the cheapest of all that serve it, or none
  const MechanismResult* running = nullptr;  // the cheapest put into a running program
};

// `purpose` as printed: "counting", "recording events", "stacks".
std::string purpose_name(ProbePurpose purpose);
// Whether mechanism `id` serves `purpose`, and whether it must be compiled into the program.
bool serves(MechanismId id, ProbePurpose purpose);
bool compiled_in(MechanismId id);

// For each purpose, the cheapest measured mechanism (CPU ns per hit) that serves it.
std::vector<Cheapest> cheapest_per_use(const CompareResult& r);

void write_verdict(std::ostream& out, const CompareResult& r);
nlohmann::json verdict_json(const CompareResult& r);

}  // namespace probecost
