#pragma once
// `probecost compare`'s report: a table per mechanism and the verdict (text), or one JSON
// document, or CSV rows; and the extrapolation alone (`overhead --cost`).
#include <ostream>
#include <string>

#include "common/format.hpp"
#include "compare/compare.hpp"

namespace probecost {

void write_report(std::ostream& out, const CompareResult& r, Format f, bool verbose);

// `probecost overhead --cost C --rate R`: the extrapolation alone.
void write_extrapolation(std::ostream& out, double cost_ns, const std::vector<double>& rates,
                         Format f);

}  // namespace probecost
