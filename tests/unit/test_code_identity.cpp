// Issue 16 §2: bytes go back only into the mapping they were written into, and only where they
// are still exactly probecost's.
#include <gtest/gtest.h>

#include "tracer/os/code_identity.hpp"

namespace probecost {
namespace {

const std::uint8_t kOurs[] = {0xCC};
const std::uint8_t kTheirs[] = {0x55};

std::vector<Mapping> maps_of(const std::string& text) {
  return parse_maps(text);
}

const std::string kLibA = "7f0000000000-7f0000002000 r-xp 00001000 08:02 1111  /lib/liba.so\n";
const std::string kLibB = "7f0000000000-7f0000002000 r-xp 00001000 08:02 2222  /lib/libb.so\n";

TEST(CodeIdentity, IsTheFileAndTheOffsetInIt) {
  auto id = code_identity(maps_of(kLibA), RuntimeAddr(0x7f0000000100));
  ASSERT_TRUE(id);
  EXPECT_EQ(id->file_id, "08:02:1111");
  EXPECT_EQ(id->file_offset, 0x1100u);
  EXPECT_EQ(id->path, "/lib/liba.so");
  EXPECT_FALSE(code_identity(maps_of(kLibA), RuntimeAddr(0x7f0000002000)));
}

TEST(CodeIdentity, TheSameMappingWithOurBytesMayBeRestored) {
  RuntimeAddr at(0x7f0000000100);
  auto then = *code_identity(maps_of(kLibA), at);
  EXPECT_EQ(why_not_ours(then, maps_of(kLibA), at, kOurs, kOurs), "");
}

TEST(CodeIdentity, AnotherLibraryAtTheSameAddressIsLeftAlone) {
  RuntimeAddr at(0x7f0000000100);
  auto then = *code_identity(maps_of(kLibA), at);
  std::string why = why_not_ours(then, maps_of(kLibB), at, kOurs, kOurs);
  EXPECT_NE(why.find("another mapping is there now (/lib/libb.so where /lib/liba.so was"),
            std::string::npos)
      << why;
}

TEST(CodeIdentity, TheSameFileAtAnotherOffsetIsLeftAlone) {
  RuntimeAddr at(0x7f0000000100);
  auto then = *code_identity(maps_of(kLibA), at);
  auto moved = maps_of("7f0000000000-7f0000002000 r-xp 00003000 08:02 1111  /lib/liba.so\n");
  EXPECT_NE(why_not_ours(then, moved, at, kOurs, kOurs), "");
}

TEST(CodeIdentity, AnUnmappedAddressIsLeftAlone) {
  RuntimeAddr at(0x7f0000000100);
  auto then = *code_identity(maps_of(kLibA), at);
  std::string why = why_not_ours(then, {}, at, kOurs, {});
  EXPECT_NE(why.find("nothing is mapped there any more"), std::string::npos) << why;
}

TEST(CodeIdentity, BytesThatAreNoLongerOursAreLeftAlone) {
  RuntimeAddr at(0x7f0000000100);
  auto then = *code_identity(maps_of(kLibA), at);
  std::string why = why_not_ours(then, maps_of(kLibA), at, kOurs, kTheirs);
  EXPECT_NE(why.find("no longer the ones probecost wrote"), std::string::npos) << why;
}

}  // namespace
}  // namespace probecost
