// Not a test: how fast record/ takes events, per format, on a synthetic stream (4 threads
// interleaved, nested calls, 2 arguments): CPU and wall ns per event through the Recorder (pairing,
// writer, summary), and the file's size.
//   record_bench DIR [MILLIONS_OF_EVENTS]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "common/error.hpp"
#include "record/recorder.hpp"

using namespace probecost;
using namespace probecost::record;

namespace {

std::uintmax_t bytes_in(const std::filesystem::path& p) {
  if (!std::filesystem::is_directory(p)) return std::filesystem::file_size(p);
  std::uintmax_t n = 0;
  for (const auto& f : std::filesystem::directory_iterator(p)) n += f.file_size();
  return n;
}

struct Cost {
  double wall_ns, cpu_ns;  // the CPU time is the one that holds on a loaded machine
};

Cost now() {
  return {static_cast<double>(tsc::clock_ns(CLOCK_MONOTONIC)),
          static_cast<double>(tsc::clock_ns(CLOCK_PROCESS_CPUTIME_ID))};
}

// Each thread: outer(i) calls inner(i) then returns: 4 events per iteration.
Cost feed(Recorder& rec, std::uint64_t events, std::uint64_t tsc0) {
  Cost t0 = now();
  constexpr int kThreads = 4;
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
  Cost t1 = now();
  return {t1.wall_ns - t0.wall_ns, t1.cpu_ns - t0.cpu_ns};
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: record_bench DIR [MILLIONS_OF_EVENTS]\n");
    return 2;
  }
  std::filesystem::path dir = argv[1];
  auto events = static_cast<std::uint64_t>((argc > 2 ? std::atof(argv[2]) : 4.0) * 1e6);
  RunInfo run;
  run.probes = {{"outer", "outer(long, long)", "bench", 0x1000},
                {"inner", "inner(long, long)", "bench", 0x2000}};
  run.arg_count = 2;
  run.clock = tsc::calibrate();
  for (TraceFormat f : {TraceFormat::chrome, TraceFormat::ctf}) {
    std::filesystem::path out = dir / (f == TraceFormat::chrome ? "bench.json" : "bench-ctf");
    std::filesystem::remove_all(out);
    Recorder rec(run, f, out.string());
    Cost c = feed(rec, events, run.clock.anchor.tsc);
    auto n = static_cast<double>(events);
    std::printf("%-6s %llu events: %.1f ns/event CPU, %.1f wall, %.1f bytes/event\n",
                f == TraceFormat::chrome ? "chrome" : "ctf",
                static_cast<unsigned long long>(events), c.cpu_ns / n, c.wall_ns / n,
                static_cast<double>(bytes_in(out)) / static_cast<double>(events));
    std::filesystem::remove_all(out);
  }
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "record_bench: %s\n", e.what());
  return 1;
}
