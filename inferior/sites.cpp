#include "inferior/sites.hpp"

#include <string_view>

#include "inferior/marker.hpp"

// noipa: besides not inlining, GCC must not look inside (an empty-looking site would have its
// calls removed) nor fold identical sites into one address (-fipa-icf), which would put the
// tracer's int3 into the baseline too.
#if defined(__clang__)
#define PROBECOST_SITE extern "C" __attribute__((noinline, used))
#else
#define PROBECOST_SITE extern "C" __attribute__((noipa, used))
#endif

namespace probecost::inferior {
__thread std::uint64_t t_site_calls = 0;
}
using probecost::inferior::t_site_calls;

PROBECOST_SITE void probecost_site_plain(std::uint64_t arg) {
  ++t_site_calls;
  asm volatile("" ::"r"(arg));
}

PROBECOST_SITE void probecost_site_probe(std::uint64_t arg) {
  ++t_site_calls;
  asm volatile("" ::"r"(arg));
}

// The probe site with a first instruction the kernel's uprobe need not single-step: a 5-byte
// NOP (x86_nops[5]: emulated, and on x86-64 kernels with uprobe optimisation rewritten into a
// call to the uprobe trampoline after the first hit), and push (emulated). The "memory"
// clobber keeps the count after it, so the asm is the first instruction.
PROBECOST_SITE void probecost_site_nop5(std::uint64_t arg) {
  asm volatile(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00" ::: "memory");
  ++t_site_calls;
  asm volatile("" ::"r"(arg));
}

PROBECOST_SITE void probecost_site_push(std::uint64_t arg) {
  asm volatile("push %%rax\n\tpop %%rax" ::: "memory");
  ++t_site_calls;
  asm volatile("" ::"r"(arg));
}

PROBECOST_SITE void probecost_site_marker(std::uint64_t arg) {
  ++t_site_calls;
  PROBECOST_MARKER(probecost::inferior::kSiteEventId, arg);
}

PROBECOST_SITE void probecost_site_int3(std::uint64_t arg) {
  ++t_site_calls;
  asm volatile("int3" ::"r"(arg));
}

// clang-format off
#define KIND(k) extern "C" void probecost_call_##k(std::uint64_t);
#define KINDS(X)                                                                        \
  X(nop) X(nop5) X(endbr64) X(push) X(pop) X(mov) X(sub) X(lea) X(lea_rip) X(load_rip) \
  X(store_rip) X(jmp32) X(jmp8) X(call) X(jcc_taken) X(jcc_not_taken) X(ret) X(frame)  \
  X(flags) X(redzone) X(branch_in) X(short) X(syscall) X(indirect) X(outside_in)
KINDS(KIND)
#undef KIND
// clang-format on

namespace probecost::inferior {

const char* const* kind_names() {
#define NAME(k) #k,
  static const char* const names[] = {KINDS(NAME) nullptr};
#undef NAME
  return names;
}

void (*kind_entry(const char* name))(std::uint64_t) {
#define ENTRY(k) \
  if (std::string_view(name) == #k) return probecost_call_##k;
  KINDS(ENTRY)
#undef ENTRY
  return nullptr;
}

}  // namespace probecost::inferior
