#pragma once
#include <vector>

namespace probecost {

struct Summary {
  double median = 0, min = 0, max = 0;
  std::size_t n = 0;
};

// Median (mean of the two middle values for an even count), min and max. Empty input: zeros.
Summary summarize(std::vector<double> values);

}  // namespace probecost
