// Not a test: a recording of N million events as `probecost record` writes it, for
// scripts/replay-bench.sh (4 threads interleaved, outer(i, 7) calling inner(i, 7), 2 arguments).
//   replay_make_recording PATH chrome|ctf [MILLIONS_OF_EVENTS]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "record/recorder.hpp"

using namespace probecost;
using namespace probecost::record;

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::fprintf(stderr, "usage: replay_make_recording PATH chrome|ctf [MILLIONS_OF_EVENTS]\n");
    return 2;
  }
  TraceFormat format = choose_format(argv[2], argv[1]);
  auto events = static_cast<std::uint64_t>((argc > 3 ? std::atof(argv[3]) : 10.0) * 1e6);
  RunInfo run;
  run.probes = {{"outer", "outer(long, long)", "bench", 0x1000},
                {"inner", "inner(long, long)", "bench", 0x2000}};
  run.arg_count = 2;
  run.clock = tsc::calibrate();
  Recorder rec(run, format, argv[1]);
  constexpr int kThreads = 4;
  std::uint64_t tsc0 = run.clock.anchor.tsc;
  for (std::uint64_t i = 0; i < events / (4 * kThreads); ++i) {
    for (int t = 0; t < kThreads; ++t) {
      std::uint64_t tsc = tsc0 + i * 400 + static_cast<std::uint64_t>(t);
      Event e{EventKind::entry, 0, 1000, 1000 + t, tsc, 0, {i, 7}, 0};
      rec.add(e);
      e.probe = 1, e.tsc += 20, rec.add(e);
      e.kind = EventKind::exit, e.tsc += 50, e.ret = i, rec.add(e);
      e.probe = 0, e.tsc += 20, rec.add(e);
    }
  }
  rec.finish();
  std::printf("%llu events, %llu calls\n", static_cast<unsigned long long>(events / 16 * 16),
              static_cast<unsigned long long>(events / 16 * 8));
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "replay_make_recording: %s\n", e.what());
  return 1;
}
