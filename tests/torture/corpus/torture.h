/* What every program of the relocation torture corpus shares: a checksum of its work, printed at
 * the end, and the convention that the functions to probe are named t_* (the suite probes every
 * instruction boundary of each). Every program is deterministic: the same output on every run,
 * traced or not. */
#ifndef TORTURE_H
#define TORTURE_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FNV-1a over 64-bit values. */
static inline uint64_t torture_mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

#define TORTURE_SEED 0xcbf29ce484222325ull

static inline void torture_print(const char* what, uint64_t h) {
  printf("%s checksum %016llx\n", what, (unsigned long long)h);
}

#ifdef __cplusplus
}
#endif

#endif
