#pragma once
// Latencies in ns, in bounded memory: a log-linear histogram (HdrHistogram's layout). Values
// below 2^kSubBits are counted exactly; above, each power of two [2^e, 2^(e+1)) is cut into
// 2^kSubBits equal buckets, so a bucket is at most 1/2^kSubBits (0.78%) of its values wide.
// A percentile is reported as its bucket's midpoint, clamped to the exact min and max: within
// 1/2^(kSubBits+1) = 0.39% of the exact value (nearest-rank definition), and exact below 128 ns.
// A power of two's buckets are allocated when a value first falls in it (1 KiB each).
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace probecost::record {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 7;
  static constexpr int kSub = 1 << kSubBits;
  // Row 0: [0, 2^kSubBits) exactly; row r >= 1: [2^(kSubBits+r-1), 2^(kSubBits+r)).
  static constexpr int kRows = 64 - kSubBits + 1;

  void add(std::uint64_t ns);

  std::uint64_t count() const { return count_; }
  std::uint64_t min() const { return count_ ? min_ : 0; }
  std::uint64_t max() const { return max_; }
  // The nearest-rank percentile (the smallest value with at least p% of the values at or below
  // it), within the error bound above; 0 when empty. p in (0, 100].
  std::uint64_t percentile(double p) const;

  // bpftrace hist()'s buckets: index 0 counts 0, index k >= 1 counts [2^(k-1), 2^k). Exact (the
  // log-linear buckets nest in them). Trailing empty buckets left off.
  std::vector<std::uint64_t> log2_counts() const;

 private:
  using Row = std::array<std::uint64_t, kSub>;
  static int row_of(std::uint64_t v);
  static int sub_of(std::uint64_t v, int row);
  static std::uint64_t low_of(int row, int sub);
  static std::uint64_t width_of(int row);

  std::array<std::unique_ptr<Row>, kRows> rows_;
  std::uint64_t count_ = 0;
  std::uint64_t min_ = UINT64_MAX;
  std::uint64_t max_ = 0;
};

}  // namespace probecost::record
