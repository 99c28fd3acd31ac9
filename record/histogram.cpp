#include "record/histogram.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace probecost::record {

int LatencyHistogram::row_of(std::uint64_t v) {
  if (v < kSub) return 0;
  return std::bit_width(v) - kSubBits;  // v in [2^(e), 2^(e+1)): e = bit_width - 1
}

int LatencyHistogram::sub_of(std::uint64_t v, int row) {
  if (row == 0) return static_cast<int>(v);
  return static_cast<int>((v >> (row - 1)) - kSub);
}

std::uint64_t LatencyHistogram::low_of(int row, int sub) {
  if (row == 0) return static_cast<std::uint64_t>(sub);
  return static_cast<std::uint64_t>(kSub + sub) << (row - 1);
}

std::uint64_t LatencyHistogram::width_of(int row) {
  return row == 0 ? 1 : std::uint64_t{1} << (row - 1);
}

void LatencyHistogram::add(std::uint64_t ns) {
  int row = row_of(ns);
  if (!rows_[row]) rows_[row] = std::make_unique<Row>();
  ++(*rows_[row])[sub_of(ns, row)];
  ++count_;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
}

std::uint64_t LatencyHistogram::percentile(double p) const {
  if (count_ == 0) return 0;
  auto rank = static_cast<std::uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  rank = std::clamp<std::uint64_t>(rank, 1, count_);
  std::uint64_t seen = 0;
  for (int row = 0; row < kRows; ++row) {
    if (!rows_[row]) continue;
    for (int sub = 0; sub < kSub; ++sub) {
      seen += (*rows_[row])[sub];
      if (seen < rank) continue;
      std::uint64_t mid = low_of(row, sub) + (width_of(row) - 1) / 2;
      return std::clamp(mid, min_, max_);
    }
  }
  return max_;
}

std::vector<std::uint64_t> LatencyHistogram::log2_counts() const {
  std::vector<std::uint64_t> counts;
  auto at = [&](std::size_t i) -> std::uint64_t& {
    if (counts.size() <= i) counts.resize(i + 1);
    return counts[i];
  };
  if (rows_[0]) {
    for (int v = 0; v < kSub; ++v) {
      std::uint64_t n = (*rows_[0])[v];
      if (n) at(static_cast<std::size_t>(std::bit_width(static_cast<unsigned>(v)))) += n;
    }
  }
  for (int row = 1; row < kRows; ++row) {
    if (!rows_[row]) continue;
    std::uint64_t n = 0;
    for (std::uint64_t c : *rows_[row]) n += c;
    // Row r holds [2^(kSubBits+r-1), 2^(kSubBits+r)): log2 bucket kSubBits + r.
    if (n) at(static_cast<std::size_t>(kSubBits + row)) += n;
  }
  return counts;
}

}  // namespace probecost::record
