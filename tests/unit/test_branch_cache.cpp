// Issue 16 §1: a module's branch index cached on disk per build-id, in a temporary
// XDG_CACHE_HOME: written once, read back equal, and a corrupt, truncated or stale file is
// ignored and written again.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/cache.hpp"
#include "tracer/jump/branch_cache.hpp"

namespace probecost {
namespace {

class BranchCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/probecost-cache-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ::setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
    const std::uint8_t code[] = {0xe8, 0x00, 0x00, 0x00, 0x00,   // call +0
                                 0x74, 0xfe,                     // je to itself
                                 0xeb, 0x02, 0x90, 0x90, 0xc3};  // jmp over two nops
    index_.add(code, FileAddr(0x1000));
  }
  void TearDown() override {
    ::unsetenv("XDG_CACHE_HOME");
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  BranchIndex index_;
  const std::string id_ = "0123456789abcdef";
};

TEST_F(BranchCache, IsWrittenUnderXdgCacheHomeAndReadBackEqual) {
  EXPECT_EQ(cache_dir(), dir_ + "/probecost");
  EXPECT_FALSE(load_branches(id_, 12));
  store_branches(id_, 12, index_);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/probecost/branches/" + id_));
  auto back = load_branches(id_, 12);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->pairs(), index_.pairs());
  EXPECT_EQ(back->into(FileAddr(0x100b), FileAddr(0x100c), FileAddr(0), FileAddr(0)).size(), 1u);
}

TEST_F(BranchCache, AStaleFileIsIgnored) {
  store_branches(id_, 12, index_);
  EXPECT_FALSE(load_branches(id_, 13));  // the same build-id with other code: not ours
}

TEST_F(BranchCache, ACorruptFileIsIgnoredAndWrittenAgain) {
  store_branches(id_, 12, index_);
  std::string path = branch_cache_path(id_);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x55');
  }
  EXPECT_FALSE(load_branches(id_, 12));
  store_branches(id_, 12, index_);
  EXPECT_TRUE(load_branches(id_, 12));
}

TEST_F(BranchCache, ATruncatedFileIsIgnored) {
  store_branches(id_, 12, index_);
  std::string path = branch_cache_path(id_);
  ASSERT_EQ(::truncate(path.c_str(), 40), 0);
  EXPECT_FALSE(load_branches(id_, 12));
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  EXPECT_FALSE(load_branches(id_, 12));
}

TEST_F(BranchCache, NoBuildIdNoCache) {
  EXPECT_EQ(branch_cache_path(""), "");
  store_branches("", 12, index_);
  EXPECT_FALSE(load_branches("", 12));
}

}  // namespace
}  // namespace probecost
