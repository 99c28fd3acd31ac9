// common/: the helpers every module shares (the formatters have test_format.cpp).
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "common/format.hpp"
#include "common/paths.hpp"

using namespace probecost;

TEST(Paths, BaseNameIsTheLastComponent) {
  EXPECT_EQ(base_name("/usr/lib/x86_64-linux-gnu/libc.so.6"), "libc.so.6");
  EXPECT_EQ(base_name("a.out"), "a.out");
  EXPECT_EQ(base_name("/"), "");
  EXPECT_EQ(base_name(""), "");
}

TEST(Format, PadCountsAUtf8SequenceAsOneCharacter) {
  EXPECT_EQ(pad("ns", 5), "   ns");
  EXPECT_EQ(pad("ns", 5, true), "ns   ");
  EXPECT_EQ(pad("2.42 \u00b5s", 9), "  2.42 \u00b5s");  // µs is 2 bytes, 1 character
  EXPECT_EQ(pad("too long", 3), "too long");
}

TEST(Format, ParsedOnceFromItsName) {
  EXPECT_EQ(parse_format("text"), Format::Text);
  EXPECT_EQ(parse_format("json"), Format::Json);
  EXPECT_EQ(parse_format("csv"), Format::Csv);
  EXPECT_THROW(parse_format("JSON"), UsageError);
  EXPECT_THROW(parse_format(""), UsageError);
}
