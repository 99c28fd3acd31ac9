#pragma once
// Test helper: a directory of the test's own under /tmp, removed with everything in it at the
// end, so that tests running side by side (ctest -j) never share a path.
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace probecost::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "probecost-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data())) path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace probecost::test
