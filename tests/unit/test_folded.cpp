// trace --folded: frames by function, so that a flame graph's tower is one per function (issue
// 28 item 6), stacks that become the same merged; --folded-offsets keeps the report's frames.
#include <gtest/gtest.h>

#include "trace/report.hpp"

namespace probecost {
namespace {

TraceReport two_call_sites() {
  TraceReport r;
  ProbeReport p;
  // Innermost first: f called from two places in main, one through a frame with no symbol.
  p.stacks = {{{"f in prog", "main+0x1f in prog", "_start+0x20 in prog"}, 5},
              {{"f in prog", "main+0x2a in prog", "_start+0x20 in prog"}, 7},
              {{"f+0x4 in prog", "libc.so.6+0x2a3f0", "0x7f0000001000"}, 2},
              {{"operator+(A, B)+0x1c in prog", "operator+=(int) in prog"}, 1}};
  r.probes.push_back(p);
  return r;
}

TEST(FoldedStacks, FramesByFunctionAndCallSitesMerged) {
  EXPECT_EQ(trace_folded_stacks(two_call_sites()),
            "_start;main;f 12\n"
            "[unknown];[libc.so.6];f 2\n"
            "operator+=(int);operator+(A, B) 1\n");
}

TEST(FoldedStacks, OffsetsOnRequestAsTheReportPrintsThem) {
  EXPECT_EQ(trace_folded_stacks(two_call_sites(), true),
            "_start+0x20 in prog;main+0x2a in prog;f in prog 7\n"
            "_start+0x20 in prog;main+0x1f in prog;f in prog 5\n"
            "0x7f0000001000;libc.so.6+0x2a3f0;f+0x4 in prog 2\n"
            "operator+=(int) in prog;operator+(A, B)+0x1c in prog 1\n");
}

}  // namespace
}  // namespace probecost
