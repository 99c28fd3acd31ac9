#pragma once
// What the tests of probecost overhead share: running it, a calibration with made-up costs, and
// reading its JSON.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_capture.hpp"

namespace probecost::test {

using Json = nlohmann::json;

inline Result run_probecost(std::vector<std::string> args) {
  args.insert(args.begin(), PROBECOST_BIN);
  return run_command(args);
}

inline void expect_usage_error(const std::vector<std::string>& args, const std::string& message) {
  Result r = run_probecost(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << "stderr was: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

inline std::string temp_file(const std::string& contents) {
  char path[] = "/tmp/probecost-overhead-test-XXXXXX";
  int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, contents.data(), contents.size()), static_cast<ssize_t>(contents.size()));
  ::close(fd);
  return path;
}

// A calibration with made-up costs, and a mechanism probecost does not know ("uprobe"): the
// prediction table is the calibration's list, whatever it holds.
inline std::string fixture_calibration() {
  Json mech = Json::array();
  auto row = [&](const char* name, double cpu, double wall, double tracer) {
    mech.push_back({{"name", name},
                    {"cpu_ns_per_hit", {{"median", cpu}, {"min", cpu}, {"max", cpu}}},
                    {"per_hit_ns", {{"median", wall}, {"min", wall}, {"max", wall}}},
                    {"tracer_cpu_ns_per_hit", tracer}});
  };
  row("baseline", 0, 0, 0);
  row("marker", 8, 8, 0);
  row("int3-ptrace-fast", 10000, 10000, 5000);
  row("jump", 2, 2, 0);
  row("uprobe", 9000, 9000, 0);
  Json j = {{"machine", {{"cpu_model", "Fixture CPU"}, {"kernel", "Linux 0"}, {"cpus", 2}}},
            {"config", {{"placement", "free"}}},
            {"mechanisms", mech}};
  return temp_file(j.dump());
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

inline const Json& predicted(const Json& j, const std::string& mechanism) {
  for (const auto& p : j["predicted"]) {
    if (p["mechanism"] == mechanism) return p;
  }
  static const Json none;
  ADD_FAILURE() << "no prediction for " << mechanism;
  return none;
}

}  // namespace probecost::test
