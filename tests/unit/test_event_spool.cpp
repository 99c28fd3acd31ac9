// record's int3 events wait in a spool file, one batch in memory (trace/event_spool.hpp): every
// event pushed is read back in order; past the bound, or with no file to be had, the events are
// counted by probe, never silently gone.
#include <gtest/gtest.h>

#include "temp_dir.hpp"
#include "trace/event_spool.hpp"

namespace probecost::trace_run {
namespace {

record::Event event(std::uint64_t i) {
  record::Event e;
  e.kind = i % 2 ? record::EventKind::exit : record::EventKind::entry;
  e.probe = static_cast<std::uint32_t>(i % 3);
  e.tid = 7;
  e.tsc = 1000 + i;
  e.ret = i * 11;
  e.args[5] = i;
  return e;
}

// Reads every event back; checks each is the i-th pushed.
std::uint64_t read_back(EventSpool& spool) {
  EventSpool::Reader r(spool);
  std::uint64_t n = 0;
  for (const record::Event* e; (e = r.peek()); r.pop(), ++n) {
    EXPECT_EQ(e->tsc, 1000 + n);
    EXPECT_EQ(e->ret, n * 11);
    EXPECT_EQ(e->args[5], n);
    EXPECT_EQ(e->probe, n % 3);
    if (e->tsc != 1000 + n) break;
  }
  return n;
}

TEST(EventSpool, EveryEventComesBackInOrderWithOneBatchInMemory) {
  test::TempDir dir{"probecost-event-spool"};
  for (std::uint64_t count : {std::uint64_t{0}, std::uint64_t{5}, 2 * EventSpool::kBatch + 17}) {
    EventSpool spool(dir.path.string());
    for (std::uint64_t i = 0; i < count; ++i) spool.push(event(i));
    EXPECT_EQ(spool.kept(), count);
    EXPECT_EQ(read_back(spool), count);
    EXPECT_EQ(spool.error(), "");
  }
}

TEST(EventSpool, PastTheBoundEventsAreCountedByProbe) {
  test::TempDir dir{"probecost-event-spool"};
  const std::uint64_t bound = EventSpool::kBatch * sizeof(record::Event);
  EventSpool spool(dir.path.string(), bound);
  const std::uint64_t count = 3 * EventSpool::kBatch;
  for (std::uint64_t i = 0; i < count; ++i) spool.push(event(i));
  EXPECT_EQ(read_back(spool), EventSpool::kBatch) << "the first batch is kept";
  EXPECT_NE(spool.error().find("reached its bound"), std::string::npos) << spool.error();
  std::uint64_t refused = 0;
  for (auto n : spool.not_kept()) refused += n;
  EXPECT_EQ(refused, count - EventSpool::kBatch);
  ASSERT_EQ(spool.not_kept().size(), 3u);
  EXPECT_EQ(spool.not_kept()[0], (count - EventSpool::kBatch) / 3);
}

TEST(EventSpool, NoFileToBeHadCountsEveryWrittenEventNotKept) {
  EventSpool spool("/nonexistent/probecost-spool-dir");
  const std::uint64_t count = EventSpool::kBatch + 1;
  for (std::uint64_t i = 0; i < count; ++i) spool.push(event(i));
  EventSpool::Reader r(spool);
  EXPECT_EQ(r.peek(), nullptr);
  EXPECT_NE(spool.error().find("/nonexistent/probecost-spool-dir"), std::string::npos)
      << spool.error();
  std::uint64_t refused = 0;
  for (auto n : spool.not_kept()) refused += n;
  EXPECT_EQ(refused, count);
}

}  // namespace
}  // namespace probecost::trace_run
