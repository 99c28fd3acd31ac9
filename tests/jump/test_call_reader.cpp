// The reader of call records alone (CallReader), on records written by hand into a call
// buffer of the test's own: what it reads when, its horizon, and a head no writer could leave.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "self_patch.hpp"

using namespace probecost;
using namespace probecost::jump;
using namespace probecost::selftest;

namespace {

// Records of format 3 (call_buffer.hpp): a sync {tsc >> 24, sp >> 24, tp}, then events.
std::uint64_t sync_word(std::uint64_t tsc, std::uint64_t sp) {
  return kSyncBit | (sp >> kWindowBits) << kSyncSpShift | tsc >> kWindowBits;
}

std::uint64_t event_word(std::uint64_t tsc, std::uint64_t sp, std::uint32_t id, bool exit) {
  return (tsc & kWindowMask) | (sp & kWindowMask) << kWindowBits | std::uint64_t{id} << kIdShift |
         (exit ? kEventExitBit : 0);
}

struct Handwritten {
  LocalCallBuffer buffer;
  explicit Handwritten(const CallBufferConfig& c) : buffer(c) {}
  std::uint8_t* control(std::uint32_t cpu) {
    const auto& l = buffer.layout();
    return buffer.view().data() + l.ctl_offset + cpu * l.ctl_stride();
  }
  void put(std::uint32_t cpu, std::uint64_t w0, std::uint64_t w1) {
    const auto& l = buffer.layout();
    std::uint64_t head;
    std::memcpy(&head, control(cpu), 8);
    std::uint64_t words[2] = {w0, w1};
    std::memcpy(buffer.view().data() + l.data_offset + cpu * l.capacity + (head % l.capacity),
                words, sizeof words);
    head += l.record_size;
    std::memcpy(control(cpu), &head, 8);
  }
  // A call's record, after a sync where a writer would put one (a sub-buffer's first record).
  void write(std::uint32_t cpu, std::uint64_t tsc, std::uint32_t id) {
    const auto& l = buffer.layout();
    std::uint64_t head;
    std::memcpy(&head, control(cpu), 8);
    std::uint64_t sp = 0x7ffc'1234'5678 + cpu;
    if (head % l.subbuffer == 0) put(cpu, sync_word(tsc, sp), 0x1000 + cpu);
    put(cpu, event_word(tsc, sp, id, false), tsc);
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
  ASSERT_EQ(h.buffer.layout().record_size, 16u);
  CallReader reader(h.buffer.view(), h.buffer.layout(), 0, {.flush_ticks = 100, .commit_slack = 5});
  // A sub-buffer (a sync and 255 calls' records) and a sync and 2 records.
  for (int i = 0; i < 257; ++i) h.write(0, 10 + 2 * i, 1);
  for (int i = 0; i < 3; ++i) h.write(1, 11 + 2 * i, 2);
  reader.poll(1000);
  std::vector<CallRecord> out;
  reader.take(out);
  // CPU 0's first sub-buffer only; CPU 1 holds the horizon at 0 (nothing read from it yet).
  EXPECT_EQ(reader.records_read(), 256u);
  EXPECT_EQ(h.consumed(0), 4096u);
  EXPECT_EQ(h.consumed(1), 0u);
  EXPECT_TRUE(out.empty());
  reader.poll(1050);  // not yet a flush interval since the part-filled sub-buffers were seen
  EXPECT_EQ(reader.records_read(), 256u);
  reader.poll(1100);
  EXPECT_EQ(reader.records_read(), 256u + 3 + 4);  // with their syncs
  EXPECT_EQ(reader.horizon(), 1095u);  // both read up to their heads at 1100, less the slack
  reader.take(out);
  ASSERT_EQ(out.size(), 260u);
  for (std::size_t i = 1; i < out.size(); ++i) EXPECT_LT(out[i - 1].tsc, out[i].tsc);
  EXPECT_EQ(out[1].id, 2u);  // tsc 11, CPU 1's first
  EXPECT_EQ(out[1].tp, 0x1001u);
  EXPECT_EQ(out[1].sp, 0x7ffc'1234'5679u);
  EXPECT_EQ(out[1].values[0], 0u);  // no argument asked
}

// Each event takes the thread, the high bits of its time and of its slot from the sync before
// it; one with no sync before it is no call's (and counted); the first argument and rax are
// whole.
TEST(CallDecoder, EventsLeanOnTheSyncBeforeThem) {
  CallDecoder d(3);
  CallRecord r;
  auto rec = [](std::uint64_t w0, std::uint64_t w1, std::uint64_t w2 = 0, std::uint64_t w3 = 0) {
    return std::array<std::uint64_t, 4>{w0, w1, w2, w3};
  };
  auto bytes = [](const std::array<std::uint64_t, 4>& w) {
    return reinterpret_cast<const std::uint8_t*>(w.data());
  };
  const std::uint64_t tsc = 0x1234'5678'9abc'def0, sp = 0x7ffd'8765'4328;
  auto orphan = rec(event_word(tsc, sp, 5, false), 1, 2, 3);
  EXPECT_FALSE(d.next(bytes(orphan), r));
  EXPECT_EQ(d.orphans(), 1u);
  auto sync = rec(sync_word(tsc, sp), 0x7f00'1234'5000);
  EXPECT_FALSE(d.next(bytes(sync), r));
  auto entry = rec(event_word(tsc + 7, sp, 16383, false), ~0ull, 2, 3);
  ASSERT_TRUE(d.next(bytes(entry), r));
  EXPECT_EQ(r.tsc, tsc + 7);
  EXPECT_EQ(r.sp, sp);
  EXPECT_EQ(r.tp, 0x7f00'1234'5000u);
  EXPECT_EQ(r.id, 16383u);
  EXPECT_FALSE(r.exit);
  EXPECT_EQ(r.values[0], ~0ull);
  EXPECT_EQ(r.values[2], 3u);
  auto exit = rec(event_word(tsc + 9, sp, 4, true), 42, 99, 99);
  ASSERT_TRUE(d.next(bytes(exit), r));
  EXPECT_TRUE(r.exit);
  EXPECT_EQ(r.id, 4u);
  EXPECT_EQ(r.values[0], 42u);
  EXPECT_EQ(r.values[1], 0u);  // an exit carries rax alone
  EXPECT_EQ(call_record_id(bytes(exit)), 4);
  EXPECT_EQ(call_record_id(bytes(sync)), -1);
  EXPECT_EQ(d.orphans(), 1u);
}

// 16 bytes a record up to one argument (uftrace writes 16 per record), 64 at most.
TEST(CallDecoder, RecordSizes) {
  EXPECT_EQ(call_record_size(0), 16u);
  EXPECT_EQ(call_record_size(1), 16u);
  EXPECT_EQ(call_record_size(2), 32u);
  EXPECT_EQ(call_record_size(3), 32u);
  EXPECT_EQ(call_record_size(4), 64u);
  EXPECT_EQ(call_record_size(6), 64u);
}

// A flush reads a part-filled sub-buffer's whole pages, a piece that starts and ends on a page
// (one O_DIRECT write to the spool); the last page's part is read at the next flush when no
// whole page has come meanwhile, and the sub-buffer's rest once it is finished. Every record
// is read once, in order.
TEST(CallReader, AFlushReadsWholePagesAndTheLastPartAtTheNext) {
  CallBufferConfig cfg;
  cfg.cpus = 1;
  cfg.capacity = 16384;
  cfg.subbuffers = 2;
  Handwritten h(cfg);
  CallReader reader(h.buffer.view(), h.buffer.layout(), 0, {.flush_ticks = 100, .commit_slack = 5});
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pieces;  // (ring offset, bytes)
  const std::uint8_t* ring = h.buffer.view().data() + h.buffer.layout().data_offset;
  CallReader::Sink sink = [&](std::uint32_t, const std::uint8_t* data, std::size_t bytes) {
    pieces.emplace_back(static_cast<std::uint64_t>(data - ring), bytes);
  };
  for (int i = 0; i < 300; ++i) h.write(0, 10 + i, 1);  // a sync and 300 records: 4,816 bytes
  EXPECT_EQ(reader.poll(1000, false, sink), 0u);        // first seen part-filled
  EXPECT_EQ(reader.poll(1100, false, sink), 4096u);     // a flush: its whole page
  EXPECT_EQ(h.consumed(0), 4096u);
  EXPECT_EQ(reader.poll(1150, false, sink), 0u);    // not a whole interval since
  EXPECT_EQ(reader.poll(1200, false, sink), 720u);  // no whole page came: up to the head
  EXPECT_EQ(h.consumed(0), 4816u);
  for (int i = 0; i < 212; ++i) h.write(0, 400 + i, 1);      // to the sub-buffer's end, and one
  EXPECT_EQ(reader.poll(1210, false, sink), 8192u - 4816u);  // finished: read at once
  EXPECT_EQ(reader.poll(1220, false, sink), 0u);
  EXPECT_EQ(reader.poll(1230, true, sink), 32u);  // the last: a sync and a record
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0], std::make_pair(std::uint64_t{0}, std::uint64_t{4096}));
  EXPECT_EQ(pieces[1], std::make_pair(std::uint64_t{4096}, std::uint64_t{720}));
  EXPECT_EQ(pieces[2], std::make_pair(std::uint64_t{4816}, std::uint64_t{8192 - 4816}));
  EXPECT_EQ(pieces[3], std::make_pair(std::uint64_t{8192}, std::uint64_t{32}));
  EXPECT_EQ(reader.records_read(), 514u);  // with the 2 syncs
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
