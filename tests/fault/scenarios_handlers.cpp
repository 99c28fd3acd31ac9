// Fault handlers that know an instruction by its address (issue 15): a fault raised by a
// relocated copy must reach the handler as the original's (item 4), and a handler parked with a
// RIP inside a probed range must return into code that still makes sense (item 3).
#include "cycles.hpp"
#include "traced.hpp"

namespace fault {

namespace {

// Where each kind is probed: with int3, on the faulting instruction itself (the out-of-line
// copy faults); with a jump, over it (the trampoline's copy faults), with the instruction the
// handler continues at displaced too (segv) or the fault first in the patch (fpe).
std::string probe_for(const std::string& kind, const std::string& strategy) {
  bool jump = strategy == "jump";
  if (kind == "segv") return jump ? "segv_site+0" : "segv_site+2";
  if (kind == "fpe") return "fpe_site+5";
  if (kind == "ill") return jump ? "ill_site+0" : "ill_site+4";
  if (kind == "bus") return jump ? "bus_site+0" : "bus_site+3";
  return "park_site+0";
}

}  // namespace

Outcome handler_cycle(const Config& cfg, const Cycle& c, const std::string& kind, bool launched) {
  Outcome o;
  std::string probe = probe_for(kind, c.strategy);
  if (launched) {
    auto t = Traced::launch(cfg, c, {"fault_handler", "--kind", kind, "--calls", "200"}, {}, probe);
    auto report = t.run().finish(after(3 * cfg.bound), o, after_text(cfg, "the command's start"));
    auto end = t.check_launched_end(cfg, o);
    if (report) {
      check_command_end(*report, o);
      if (end) check_hits(*report, std::stoull((*end)["site_calls"]), o);
    }
    o.faults = 100;
    return o;
  }
  auto t = Traced::attach(cfg, c, {"fault_handler", "--kind", kind, "--attached"}, {}, probe);
  if (!t.traced_or_lost(after(cfg.start_bound), o)) {
    t.check_attached(cfg, o);
    return o;
  }
  t.counted_round(cfg, 100, 100, o);
  o.faults = 50;
  return o;
}

// Attached while its thread is parked in a SIGSEGV handler whose frame's RIP is inside the
// bytes a jump at park_site+0 would cover. A jump there must be refused (the thread would
// return into the middle of it); int3 is fine. Then 100 calls, which must all be counted.
Outcome parked_cycle(const Config& cfg, const Cycle& c) {
  Outcome o;
  auto t = Traced::attach(cfg, c, {"fault_handler", "--kind", "park", "--attached"}, {},
                          probe_for("park", c.strategy));
  bool traced = t.wait_traced(after(cfg.start_bound));
  t.pipes().send("release");
  t.pipes().send("go 100");
  auto done = t.pipes().wait_line("done", after(3 * cfg.bound));
  if (traced) t.run().signal(SIGINT);
  // A refusal (exit 2, the reason on stderr) is a fair answer for a jump here.
  auto report = t.run().finish(after(cfg.bound), o, after_text(cfg, "SIGINT"),
                               c.strategy == "jump" ? std::vector<int>{2} : std::vector<int>{});
  if (!done) o.harm("the round of calls after the handler returned did not finish");
  if (report) check_hits(*report, 100, o);
  t.check_attached(cfg, o);
  return o;
}

}  // namespace fault
