#include "tracer/core/copy_exits.hpp"

#include <cstring>
#include <memory>

#include "common/error.hpp"
#include "tracer/core/stacks.hpp"

namespace probecost {

namespace {

// Frames walked per thread looking for signal frames, as JumpProbes does.
constexpr unsigned kMaxFrames = 256;

// Rewrites the saved RIP of each signal frame on `tid`'s stack that would return into a copy.
void move_signal_returns(TracedProcess& proc, pid_t tid, StackCollector& unwinder) {
  const CopyMap& copies = proc.space().relocated();
  for (const auto& r : unwinder.signal_returns(tid)) {
    auto to = copies.in_original(RuntimeAddr(r.pc));
    if (!to || r.slot == 0) continue;
    // The slot must hold what libunwind read from it: then it is the frame's saved RIP.
    std::uint64_t now = 0;
    proc.memory().read(RuntimeAddr(r.slot), {reinterpret_cast<std::uint8_t*>(&now), sizeof now});
    if (now != r.pc) continue;
    std::uint64_t value = to->value();
    proc.memory().write(RuntimeAddr(r.slot),
                        {reinterpret_cast<const std::uint8_t*>(&value), sizeof value});
  }
}

}  // namespace

void leave_copies(TracedProcess& proc) {
  const CopyMap& copies = proc.space().relocated();
  if (copies.empty()) return;
  std::unique_ptr<StackCollector> unwinder;
  try {
    unwinder = std::make_unique<StackCollector>(kMaxFrames);
  } catch (const Error&) {
  }
  for (auto& [tid, t] : proc.threads()) {
    if (!t.stopped()) continue;
    if (auto rip = t.rip()) {
      if (auto to = copies.in_original(*rip)) t.set_rip(*to);
    }
    if (!unwinder) continue;
    try {
      move_signal_returns(proc, tid, *unwinder);
    } catch (const Error&) {
      // Gone meanwhile (its memory with it): nothing left to fix.
    }
  }
}

}  // namespace probecost
