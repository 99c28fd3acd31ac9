#pragma once
// `probecost overhead`'s report: text, or one JSON document.
#include <nlohmann/json.hpp>
#include <ostream>

#include "compare/report.hpp"
#include "overhead/overhead.hpp"

namespace probecost {

// The result as one JSON document (report_json.cpp).
nlohmann::json overhead_json(const OverheadResult& r);

// Format::Csv is refused by the command before anything runs.
void write_overhead(std::ostream& out, const OverheadResult& r, Format f);

// `probecost overhead --cost C ... --rate R ...`: the extrapolation alone, every cost at
// every rate.
void write_cost_table(std::ostream& out, const std::vector<double>& costs_ns,
                      const std::vector<double>& rates, Format f);

}  // namespace probecost
