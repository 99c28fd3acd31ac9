// The warm loop's page (breakpoint/in_tracee/warm_loop.hpp): told apart from any other page, and
// the registers a thread left in it has once its `leave; ret` has run, wherever it stopped.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "breakpoint/in_tracee/warm_loop.hpp"

using namespace probecost;

namespace {

const RuntimeAddr kPage(0x7f0000001000);
constexpr std::uint64_t kRsp = 0x7ffd00002000, kFrame = 0x7ffd00000f40;
constexpr std::uint64_t kSavedRbp = 0x7ffd00002100, kRestoreRt = 0x7f00000a1230;

warm::LoopStop stop_at(std::size_t offset, std::uint64_t rsp = kRsp) {
  return {kPage, kPage.value() + offset, rsp, kFrame};
}

}  // namespace

TEST(WarmLoop, ItsPageIsToldApartByHeaderAndCode) {
  auto bytes = warm::page_bytes(kPage, 4242);
  EXPECT_TRUE(warm::is_warm_page(bytes, kPage));
  EXPECT_FALSE(warm::is_warm_page(bytes, kPage + 4096));  // a copy of the page elsewhere
  auto other_code = bytes;
  other_code[warm::kCodeOffset + 1] ^= 1;
  EXPECT_FALSE(warm::is_warm_page(other_code, kPage));
  auto scratch = bytes;
  std::memcpy(scratch.data(), kScratchMagic, sizeof kScratchMagic);
  EXPECT_FALSE(warm::is_warm_page(scratch, kPage));
  EXPECT_FALSE(warm::is_warm_page(std::span(bytes).first(bytes.size() - 1), kPage));
}

TEST(WarmLoop, AThreadAnywhereBeforeTheRetLeavesByItsFrame) {
  const std::array<std::uint64_t, 2> frame = {kSavedRbp, kRestoreRt};
  for (std::size_t at = warm::kCodeOffset; at < warm::kRetOffset; ++at) {
    auto s = stop_at(at);
    ASSERT_EQ(warm::words_at(s), kFrame) << at;
    auto rest = warm::rest_of_way(s, frame);
    ASSERT_TRUE(rest) << at;
    EXPECT_EQ(rest->rip, kRestoreRt);
    EXPECT_EQ(rest->rsp, kFrame + 16);  // the ucontext, as rt_sigreturn reads it at RSP - 8
    EXPECT_EQ(rest->rbp, kSavedRbp);
  }
}

TEST(WarmLoop, AThreadAtTheRetTakesItsReturnAddressFromTheStack) {
  auto s = stop_at(warm::kRetOffset, kFrame + 8);  // after `leave`
  ASSERT_EQ(warm::words_at(s), kFrame + 8);
  const std::array<std::uint64_t, 2> top = {kRestoreRt, 0};
  auto rest = warm::rest_of_way(s, top);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->rip, kRestoreRt);
  EXPECT_EQ(rest->rsp, kFrame + 16);
  EXPECT_EQ(rest->rbp, kFrame);  // popped by the `leave` already
}

TEST(WarmLoop, AThreadOutsideTheLoopIsNotMoved) {
  const std::array<std::uint64_t, 2> frame = {kSavedRbp, kRestoreRt};
  for (std::size_t at :
       {std::size_t{0}, warm::kCodeOffset - 1, warm::kRetOffset + 1, std::size_t{4095}}) {
    EXPECT_FALSE(warm::words_at(stop_at(at))) << at;
    EXPECT_FALSE(warm::rest_of_way(stop_at(at), frame)) << at;
  }
}
