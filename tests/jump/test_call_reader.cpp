// The reader of call records alone (CallReader), on records written by hand into a call
// buffer of the test's own: what it reads when, its horizon, and a head no writer could leave.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "self_patch.hpp"

using namespace probecost;
using namespace probecost::jump;
using namespace probecost::selftest;

namespace {

struct Handwritten {
  LocalCallBuffer buffer;
  explicit Handwritten(const CallBufferConfig& c) : buffer(c) {}
  std::uint8_t* control(std::uint32_t cpu) {
    const auto& l = buffer.layout();
    return buffer.view().data() + l.ctl_offset + cpu * l.ctl_stride();
  }
  void write(std::uint32_t cpu, std::uint64_t tsc, std::uint32_t id) {
    const auto& l = buffer.layout();
    std::uint64_t head;
    std::memcpy(&head, control(cpu), 8);
    std::uint64_t words[4] = {tsc, 0x1000 + cpu, 0x7ff0 | (std::uint64_t{id} << kIdShift), tsc};
    std::memcpy(buffer.view().data() + l.data_offset + cpu * l.capacity + (head % l.capacity),
                words, sizeof words);
    head += l.record_size;
    std::memcpy(control(cpu), &head, 8);
  }
  std::uint64_t consumed(std::uint32_t cpu) {
    std::uint64_t v;
    std::memcpy(&v, control(cpu) + kConsumedOffset, 8);
    return v;
  }
};

TEST(CallReader, ReadsFinishedSubBuffersAndFlushesPartOnesLater) {
  CallBufferConfig cfg;
  cfg.cpus = 2;
  cfg.capacity = 8192;
  cfg.subbuffers = 2;
  Handwritten h(cfg);
  CallReader reader(h.buffer.view(), h.buffer.layout(), 0, {.flush_ticks = 100, .commit_slack = 5});
  for (int i = 0; i < 130; ++i) h.write(0, 10 + 2 * i, 1);  // a sub-buffer and 2 records
  for (int i = 0; i < 3; ++i) h.write(1, 11 + 2 * i, 2);
  reader.poll(1000);
  std::vector<CallRecord> out;
  reader.take(out);
  // CPU 0's first sub-buffer only; CPU 1 holds the horizon at 0 (nothing read from it yet).
  EXPECT_EQ(reader.records_read(), 128u);
  EXPECT_EQ(h.consumed(0), 4096u);
  EXPECT_EQ(h.consumed(1), 0u);
  EXPECT_TRUE(out.empty());
  reader.poll(1050);  // not yet a flush interval since the part-filled sub-buffers were seen
  EXPECT_EQ(reader.records_read(), 128u);
  reader.poll(1100);
  EXPECT_EQ(reader.records_read(), 133u);
  EXPECT_EQ(reader.horizon(), 1095u);  // both read up to their heads at 1100, less the slack
  reader.take(out);
  ASSERT_EQ(out.size(), 133u);
  for (std::size_t i = 1; i < out.size(); ++i) EXPECT_LT(out[i - 1].tsc, out[i].tsc);
  EXPECT_EQ(out[1].id, 2u);  // tsc 11, CPU 1's first
  EXPECT_EQ(out[1].tp, 0x1001u);
  EXPECT_EQ(out[1].sp, 0x7ff0u);
}

TEST(CallReader, AHeadNoWriterCouldHaveLeftIsAnError) {
  CallBufferConfig cfg;
  cfg.cpus = 1;
  cfg.capacity = 8192;
  cfg.subbuffers = 2;
  Handwritten h(cfg);
  CallReader reader(h.buffer.view(), h.buffer.layout(), 0, {});
  std::uint64_t bad = 40;  // not a whole record
  std::memcpy(h.control(0), &bad, 8);
  EXPECT_THROW(reader.poll(1), Error);
}

}  // namespace
