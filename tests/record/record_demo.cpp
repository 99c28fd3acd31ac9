// Not a test: writes an example trace of a synthetic stream in both formats, to look at in
// Perfetto UI / chrome://tracing and babeltrace2 / Trace Compass:
//   record_demo DIR   ->  DIR/example.json, DIR/example-ctf/, DIR/example-summary.json
// Two threads of a made-up server: handle(request) calls parse() and fib(n) recursively; one
// request's parse() throws, caught in handle() (parse is left unmatched: a "B" event).
#include <iostream>

#include "common/error.hpp"
#include "record/recorder.hpp"

using namespace probecost;
using namespace probecost::record;

namespace {

struct Feeder {
  Recorder& rec;
  std::int32_t tid;
  std::uint64_t tsc;
  std::uint64_t sp = 0x7ffc'0000'1000;

  void enter(std::uint32_t probe, std::uint64_t arg0, std::uint64_t ticks) {
    sp -= 0x40;
    Event e{EventKind::entry, probe, 4242, tid, tsc += ticks, sp, {arg0, arg0 * 2}, 0};
    rec.add(e);
  }
  void leave(std::uint32_t probe, std::uint64_t ret, std::uint64_t ticks) {
    rec.add(Event{EventKind::exit, probe, 4242, tid, tsc += ticks, sp, {}, ret});
    sp += 0x40;
  }
  std::uint64_t fib(std::uint64_t n) {
    enter(2, n, 30);
    std::uint64_t r = n < 2 ? n : fib(n - 1) + fib(n - 2);
    leave(2, r, 40);
    return r;
  }
  void request(std::uint64_t id) {
    enter(0, id, 3000);
    enter(1, id, 200);
    if (id % 5 == 4) {
      sp += 0x40;  // parse() threw; handle() caught it
    } else {
      leave(1, 0, 900 + id * 37 % 500);
      fib(3 + id % 4);
    }
    leave(0, id % 5 == 4 ? static_cast<std::uint64_t>(-22) : 0, 500);
  }
};

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 2) {
    std::cerr << "usage: record_demo DIR\n";
    return 2;
  }
  std::string dir = argv[1];
  RunInfo run;
  run.probes = {{"handle", "server::handle(unsigned long)", "demo", 0x401000},
                {"parse", "server::parse(unsigned long)", "demo", 0x401100},
                {"fib", "fib(unsigned long)", "demo", 0x401200}};
  run.arg_count = 2;
  run.clock = tsc::calibrate();
  for (TraceFormat format : {TraceFormat::chrome, TraceFormat::ctf}) {
    Recorder rec(run, format,
                 dir + (format == TraceFormat::chrome ? "/example.json" : "/example-ctf"));
    rec.process_name(4242, "demo-server");
    std::uint64_t start = run.clock.anchor.tsc;
    Feeder a{rec, 4242, start}, b{rec, 4243, start + 1500};
    rec.thread_name(4242, 4242, "demo-server", start);
    rec.thread_name(4242, 4243, "worker-1", start);
    for (std::uint64_t id = 0; id < 20; ++id) {
      a.request(id);
      b.request(id + 100);
    }
    rec.lost({4242, 4243, 2, 3});
    rec.finish();
    if (format == TraceFormat::chrome) {
      rec.summary().print(std::cout);
      rec.summary().write_json(dir + "/example-summary.json");
    }
  }
  return 0;
} catch (const Error& e) {
  std::cerr << "record_demo: " << e.what() << "\n";
  return 1;
}
