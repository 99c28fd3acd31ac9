#pragma once
// Why a measurement and its prediction differ, and what a watcher of a running process cannot
// know: the text analyze() adds to a result. Private to overhead/.
#include <string>
#include <vector>

#include "overhead/overhead.hpp"

namespace probecost {

// Why the prediction for the mechanism used is off, from what the runs and the calibration
// show. Each line names its evidence, and only a cause the mechanism used can have.
std::vector<std::string> explain(const OverheadResult& r);

// Attached: what probecost cannot know about a process it did not start, for the reference
// the measurement had.
std::vector<std::string> what_cannot_be_known(const Measurement& m);

// (max - min) / |median|: 0 for a median of 0.
double ratio_spread(const Summary& s);

}  // namespace probecost
