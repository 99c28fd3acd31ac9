#include "compare/stats.hpp"

#include <algorithm>

namespace probecost {

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  std::size_t mid = v.size() / 2;
  s.median = v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  return s;
}

}  // namespace probecost
