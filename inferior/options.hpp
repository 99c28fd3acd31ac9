#pragma once
// probecost-inferior's command line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "inferior/marker.hpp"

namespace probecost::inferior {

struct Options {
  std::string site = "plain";
  bool marker_on = false;
  bool sigtrap_handler = false;
  std::uint64_t iterations = 1'000'000;
  unsigned threads = 1;
  std::size_t work_bytes = 0;  // 0: empty work
  std::size_t marker_capacity = probecost::marker::kDefaultCapacity;
  std::vector<int> pin_threads;   // thread i runs on pin_threads[i % size]; empty: not pinned
  bool stop_before_loop = false;  // SIGSTOP once every thread is ready, before the timed loops
};

// Exits with status 2 and a message on stderr on bad usage.
Options parse_options(int argc, char** argv);
[[noreturn]] void usage_error(const std::string& msg);

}  // namespace probecost::inferior
