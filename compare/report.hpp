#pragma once
#include <ostream>
#include <string>

#include "compare/compare.hpp"
#include "compare/format.hpp"

namespace probecost {

enum class Format { Text, Json, Csv };
Format parse_format(const std::string& text);

void write_report(std::ostream& out, const CompareResult& r, Format f, bool verbose);

// `probecost overhead --cost C --rate R`: the extrapolation alone.
void write_extrapolation(std::ostream& out, double cost_ns, const std::vector<double>& rates,
                         Format f);

}  // namespace probecost
