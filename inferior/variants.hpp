#pragma once
// Marker variants for the seeds' disabled-marker comparisons, each a probe site of its own
// (probecost_mv_VARIANT_N, N = 0, 1, 3 or 6 arguments; none_0 is the same site without a
// marker, compiled alike: their baseline). Disabled, each costs what its kind of
// site costs; enabled, each calls the same out-of-line probe, which writes {TSC, id, N
// arguments} into the calling thread's ring:
//
//   flag        today's marker: load of a flag in memory, test, branch predicted not taken
//               (seed 000's "generic" marker)
//   immediate   seed 000's "optimized" marker: `movb $0, %al` whose immediate enabling patches
//               to 1, test, branch
//   static-key  a 5-byte NOP that enabling patches into a `jmp` to the marker code out of
//               line (the kernel's asm goto static branch, done in user space at run time)
//   nop-call    seed 002's NOP site: the arguments are set up in their registers on every
//               call, and a 5-byte NOP stands where the call goes; enabling patches the NOP into
//               `call` to the probe
//
// Enabling and disabling patch the program's own text (mprotect, write, mprotect back). They
// are called before the workload's threads start: patching code other threads are running
// would need the kernel's int3-first sequence (text_poke_bp), which this does not do.
#include <cstdint>
#include <string>
#include <vector>

namespace probecost::inferior::variants {

using SiteFn = void (*)(std::uint64_t);

struct VariantSite {
  std::string variant;  // none, flag, immediate, static-key, nop-call
  int args = 0;         // 0, 1, 3, 6
  std::string symbol;   // probecost_mv_..., for the tracer's and compare's look-ups
  SiteFn fn = nullptr;
};

const std::vector<VariantSite>& all_sites();
// "flag:3" style names; null when unknown.
const VariantSite* find_site(const std::string& name);
const char* const* variant_names();

// Turns every variant on or off: the flag, and the patched bytes of every site.
void set_enabled(bool on);

// The records the enabled probes wrote on this thread: each is 2 + N words.
struct RingView {
  std::uint64_t records = 0;
  std::uint64_t last_id = 0;  // the last record's header word: N << 32 | event id
  std::uint64_t last_first_arg = 0;
};
void thread_init();
RingView view();
void thread_release();

inline constexpr std::uint32_t kVariantEventId = 2;

}  // namespace probecost::inferior::variants
