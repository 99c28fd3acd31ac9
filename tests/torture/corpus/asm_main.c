/* Calls the routines of asm_tricky.S with varied arguments and prints a checksum of every
 * result and of the memory they wrote. The AVX2 and AVX-512 routines run only where the CPU
 * has those instructions (the suite does not probe them elsewhere, and says so). */
#include <string.h>

#include "torture.h"

long t_flags_caller(long x, unsigned long a, unsigned long b);
long t_flags_mid(unsigned long a, unsigned long b);
long t_df_copy(char* dst, const char* src, long n);
long t_redzone(long x);
long t_riprel(long x);
long t_riprel_jmp(long x);
int t_avx2_sum(int* v);
int t_avx512_sum(int* v);
long t_lock(uint64_t* q);
long t_rep_movsb(void* dst, const void* src, long n);
long t_rep_stosq(void* dst, uint64_t v, long n);
long t_repe_cmpsb(const void* a, const void* b, long n);
long t_repne_scasb(const char* s);
long t_ret_imm_caller(long x, long on_stack);
long t_enter_leave(long x);
long t_loop(long n);
long t_branch_into(long n);
long t_jcc_chain(long x);
long t_tailjmp(long x);
long t_call_middle(long x);
long t_misc(long x, long y);
long t_push_pop(long x);
long t_syscall(long x);

static uint64_t run_vectors(uint64_t h, int i) {
  int v[32];
  for (int k = 0; k < 32; ++k) v[k] = k * 7 + i;
  if (__builtin_cpu_supports("avx2")) {
    h = torture_mix(h, (uint64_t)t_avx2_sum(v));
    for (int k = 0; k < 8; ++k) h = torture_mix(h, (uint64_t)v[k]);
  }
  if (__builtin_cpu_supports("avx512f")) {
    h = torture_mix(h, (uint64_t)t_avx512_sum(v));
    for (int k = 0; k < 16; ++k) h = torture_mix(h, (uint64_t)v[k]);
  }
  return h;
}

static uint64_t run_strings(uint64_t h, int i) {
  char src[96], dst[96];
  for (int k = 0; k < 96; ++k) src[k] = (char)('A' + (k * 5 + i) % 26);
  memset(dst, 0, sizeof dst);
  long n = (i * 13) % 90;
  h = torture_mix(h, (uint64_t)t_rep_movsb(dst, src, n));
  h = torture_mix(h, (uint64_t)t_repe_cmpsb(dst, src, n));
  dst[n / 2] ^= (char)(i & 1);
  h = torture_mix(h, (uint64_t)t_repe_cmpsb(dst, src, n));
  h = torture_mix(h, (uint64_t)t_df_copy(dst, src, n));
  dst[n] = 0;
  h = torture_mix(h, (uint64_t)t_repne_scasb(dst));
  uint64_t q[12] = {0};
  h = torture_mix(h, (uint64_t)(t_rep_stosq(q, 0x0101010101010101ull * (uint64_t)i, i % 12) -
                                (long)(uintptr_t)q));
  for (int k = 0; k < 96; ++k) h = torture_mix(h, (uint64_t)dst[k]);
  for (int k = 0; k < 12; ++k) h = torture_mix(h, q[k]);
  return h;
}

int main(void) {
  uint64_t h = TORTURE_SEED;
  uint64_t q[4] = {0};
  for (int i = 0; i < 24; ++i) {
    long x = (long)i * 0x0123456789abll - 5000;
    h = torture_mix(h, (uint64_t)t_flags_caller(i, (unsigned long)i, 11));
    h = torture_mix(h, (uint64_t)t_flags_caller(i, 0x7fffffffffffff00ul + (unsigned long)i, 0xff));
    h = torture_mix(h, (uint64_t)t_flags_mid((unsigned long)i, 12));
    h = torture_mix(h, (uint64_t)t_redzone(x));
    h = torture_mix(h, (uint64_t)t_riprel(i));
    h = torture_mix(h, (uint64_t)t_riprel_jmp(i));
    h = run_vectors(h, i);
    h = torture_mix(h, (uint64_t)t_lock(q));
    for (int k = 0; k < 4; ++k) h = torture_mix(h, q[k]);
    h = run_strings(h, i);
    h = torture_mix(h, (uint64_t)t_ret_imm_caller(i, 1000 - i));
    h = torture_mix(h, (uint64_t)t_enter_leave(x));
    h = torture_mix(h, (uint64_t)t_loop(i % 7));
    h = torture_mix(h, (uint64_t)t_branch_into(i % 5 + 1));
    h = torture_mix(h, (uint64_t)t_jcc_chain(i));
    h = torture_mix(h, (uint64_t)t_tailjmp(x));
    h = torture_mix(h, (uint64_t)t_call_middle(x));
    h = torture_mix(h, (uint64_t)t_misc(x, i % 9 + 1));
    h = torture_mix(h, (uint64_t)t_push_pop(x));
    h = torture_mix(h, (uint64_t)t_syscall(x));
  }
  torture_print("asm_tricky", h);
  return 0;
}
