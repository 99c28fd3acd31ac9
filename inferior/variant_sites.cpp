// The marker variant sites (see variants.hpp). Built with -O2 -fno-ipa-icf -mno-red-zone: the
// nop-call site's patched `call` pushes a return address below the stack pointer, where the
// red zone would be.
#include <cstdint>

#include "inferior/sites.hpp"

using probecost::inferior::t_site_calls;

extern "C" {
// The probes (variants.cpp): write one record of N arguments.
void probecost_variant_probe0();
void probecost_variant_probe1(std::uint64_t a1);
void probecost_variant_probe3(std::uint64_t a1, std::uint64_t a2, std::uint64_t a3);
void probecost_variant_probe6(std::uint64_t a1, std::uint64_t a2, std::uint64_t a3,
                              std::uint64_t a4, std::uint64_t a5, std::uint64_t a6);
// The flag of the flag variant; a value the arguments load from memory.
extern bool probecost_variant_flag;
extern std::uint64_t probecost_variant_salt;
}

#if defined(__clang__)
#define PROBECOST_SITE extern "C" __attribute__((noinline, used))
#else
#define PROBECOST_SITE extern "C" __attribute__((noipa, used))
#endif

// The arguments: the call's own, a thread-local load (seed 002's current->pid), a global load,
// and three computed from the first.
#define ARGS0
#define ARGS1 arg
#define ARGS3 arg, t_site_calls, probecost_variant_salt
#define ARGS6 arg, t_site_calls, probecost_variant_salt, arg * 3, arg ^ 0x5a, arg >> 1

// Records a patch site in a table the enabling code walks: __start_/__stop_SECTION.
#define TABLE(section) ".pushsection " #section ", \"aw\"\n\t.balign 8\n\t"

#define FLAG_SITE(N)                                                                     \
  PROBECOST_SITE void probecost_mv_flag_##N([[maybe_unused]] std::uint64_t arg) {        \
    ++t_site_calls;                                                                      \
    if (__builtin_expect(__atomic_load_n(&probecost_variant_flag, __ATOMIC_RELAXED), 0)) \
      probecost_variant_probe##N(ARGS##N);                                               \
  }

// movb $imm8, %al is b0 ib: the immediate is the byte after the label.
#define IMMEDIATE_SITE(N)                                                              \
  PROBECOST_SITE void probecost_mv_immediate_##N([[maybe_unused]] std::uint64_t arg) { \
    ++t_site_calls;                                                                    \
    asm goto("1: movb $0, %%al\n\ttestb %%al, %%al\n\tjne %l[on]\n\t" TABLE(           \
                 probecost_immediates) ".quad 1b + 1\n\t.popsection" ::                \
                 : "rax", "cc"                                                         \
             : on);                                                                    \
    return;                                                                            \
  on:                                                                                  \
    __attribute__((cold));                                                             \
    probecost_variant_probe##N(ARGS##N);                                               \
  }

// The NOP is x86_nops[5]; enabling writes e9 rel32 to the `on` label.
#define STATIC_KEY_SITE(N)                                                              \
  PROBECOST_SITE void probecost_mv_static_key_##N([[maybe_unused]] std::uint64_t arg) { \
    ++t_site_calls;                                                                     \
    asm goto("1: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n\t" TABLE(                         \
        probecost_static_keys) ".quad 1b, %l[on]\n\t.popsection" :: ::on);              \
    return;                                                                             \
  on:                                                                                   \
    __attribute__((cold));                                                              \
    probecost_variant_probe##N(ARGS##N);                                                \
  }

// The arguments go into their ABI registers whether the NOP is patched or not; enabling writes
// e8 rel32 to probecost_variant_trampN (variant_tramp.S), which aligns the stack and calls the
// probe. Everything a call may change is declared clobbered.
#define NOP_CALL_CLOBBERS                                                                      \
  "rax", "r10", "r11", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", \
      "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
#define NOP_CALL_ASM(N)                              \
  "1: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n\t" TABLE( \
      probecost_nop_calls) ".quad 1b, probecost_variant_tramp" #N "\n\t.popsection"

// The variants' baseline: the same site with no marker, compiled alike.
PROBECOST_SITE void probecost_mv_none_0(std::uint64_t arg) {
  ++t_site_calls;
  asm volatile("" ::"r"(arg));
}

PROBECOST_SITE void probecost_mv_nop_call_0(std::uint64_t arg) {
  ++t_site_calls;
  register std::uint64_t rdi asm("rdi") = arg;  // the site's own argument stays live
  register std::uint64_t rsi asm("rsi"), rdx asm("rdx"), rcx asm("rcx"), r8 asm("r8"), r9 asm("r9");
  asm volatile(NOP_CALL_ASM(0)
               : "+r"(rdi), "=r"(rsi), "=r"(rdx), "=r"(rcx), "=r"(r8), "=r"(r9)
               :
               : NOP_CALL_CLOBBERS);
}

PROBECOST_SITE void probecost_mv_nop_call_1(std::uint64_t arg) {
  ++t_site_calls;
  register std::uint64_t rdi asm("rdi") = arg;
  register std::uint64_t rsi asm("rsi"), rdx asm("rdx"), rcx asm("rcx"), r8 asm("r8"), r9 asm("r9");
  asm volatile(NOP_CALL_ASM(1)
               : "+r"(rdi), "=r"(rsi), "=r"(rdx), "=r"(rcx), "=r"(r8), "=r"(r9)
               :
               : NOP_CALL_CLOBBERS);
}

PROBECOST_SITE void probecost_mv_nop_call_3(std::uint64_t arg) {
  ++t_site_calls;
  register std::uint64_t rdi asm("rdi") = arg;
  register std::uint64_t rsi asm("rsi") = t_site_calls;
  register std::uint64_t rdx asm("rdx") = probecost_variant_salt;
  register std::uint64_t rcx asm("rcx"), r8 asm("r8"), r9 asm("r9");
  asm volatile(NOP_CALL_ASM(3)
               : "+r"(rdi), "+r"(rsi), "+r"(rdx), "=r"(rcx), "=r"(r8), "=r"(r9)
               :
               : NOP_CALL_CLOBBERS);
}

PROBECOST_SITE void probecost_mv_nop_call_6(std::uint64_t arg) {
  ++t_site_calls;
  register std::uint64_t rdi asm("rdi") = arg;
  register std::uint64_t rsi asm("rsi") = t_site_calls;
  register std::uint64_t rdx asm("rdx") = probecost_variant_salt;
  register std::uint64_t rcx asm("rcx") = arg * 3;
  register std::uint64_t r8 asm("r8") = arg ^ 0x5a;
  register std::uint64_t r9 asm("r9") = arg >> 1;
  asm volatile(NOP_CALL_ASM(6)
               : "+r"(rdi), "+r"(rsi), "+r"(rdx), "+r"(rcx), "+r"(r8), "+r"(r9)
               :
               : NOP_CALL_CLOBBERS);
}

FLAG_SITE(0)
FLAG_SITE(1)
FLAG_SITE(3)
FLAG_SITE(6)
IMMEDIATE_SITE(0)
IMMEDIATE_SITE(1)
IMMEDIATE_SITE(3)
IMMEDIATE_SITE(6)
STATIC_KEY_SITE(0)
STATIC_KEY_SITE(1)
STATIC_KEY_SITE(3)
STATIC_KEY_SITE(6)
