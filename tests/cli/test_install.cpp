// `cmake --install` into a temporary prefix: probecost in bin, probecost-inferior in
// libexec/probecost, and the installed probecost finds the installed inferior from its own
// location (issue 19 §5).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "run_capture.hpp"

using probecost::test::Result;
using probecost::test::run_command;

TEST(Install, InstalledProbecostRunsCompareWithItsInstalledInferior) {
  char dir[] = "/tmp/probecost-install-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  std::string prefix = dir;
  Result install = run_command({CMAKE_COMMAND, "--install", BUILD_DIR, "--prefix", prefix});
  ASSERT_EQ(install.exit_code, 0) << install.out << install.err;
  std::string probecost = prefix + "/bin/probecost";
  std::string inferior = prefix + "/libexec/probecost/probecost-inferior";
  EXPECT_EQ(::access(probecost.c_str(), X_OK), 0) << install.out;
  EXPECT_EQ(::access(inferior.c_str(), X_OK), 0) << install.out;

  Result r = run_command(
      {probecost, "compare", "-m", "baseline,marker", "-n", "20000", "-r", "1", "-f", "json"});
  // A figure judged noise on a busy machine is a warning on stderr, not a failure.
  EXPECT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["config"]["inferior"], inferior);
  ASSERT_EQ(j["mechanisms"].size(), 2u);
  EXPECT_EQ(j["mechanisms"][1]["name"], "marker");
  EXPECT_EQ(j["mechanisms"][1]["hits"], 20000);
  EXPECT_TRUE(j["mechanisms"][1]["hits_exact"].get<bool>());
  std::string rm = "rm -rf " + prefix;
  EXPECT_EQ(std::system(rm.c_str()), 0);
}
