#pragma once
// USDT markers as programs ship them (systemtap's <sys/sdt.h>), with semaphores: each one a
// nop and a .note.stapsdt note, its arguments computed only while its semaphore is non-zero.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

// The semaphore of PROVIDER:NAME: <sys/sdt.h> names it PROVIDER_NAME_semaphore, in .probes.
#define PROBECOST_SEMAPHORE(provider, name)                                          \
  extern "C" {                                                                       \
  __extension__ unsigned short provider##_##name##_semaphore __attribute__((unused)) \
  __attribute__((section(".probes")));                                               \
  }
#define PROBECOST_ENABLED(provider, name) \
  (*static_cast<volatile unsigned short*>(&provider##_##name##_semaphore) != 0)
