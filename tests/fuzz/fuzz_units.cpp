// libFuzzer: rates (750k, 1.2M) and durations (2.01us, 220ns), as `--rate` and `--cost` take
// them. A bad one is a UsageError; a good one is a finite number > 0.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "compare/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  for (auto parse : {probecost::parse_rate, probecost::parse_duration_ns}) {
    try {
      double v = parse(text);
      if (!(v > 0) || !std::isfinite(v)) __builtin_trap();
    } catch (const probecost::UsageError&) {
    }
  }
  return 0;
}
