/* The nop-call variant's call targets (see variant_sites.cpp). The patched site calls here with
 * the probe's arguments already in %rdi..%r9 and the stack wherever the site left it: align it
 * for the C probe, call it, and go back. */

#define TRAMP(n)                            \
  .globl probecost_variant_tramp##n;        \
  .type probecost_variant_tramp##n, @function; \
probecost_variant_tramp##n:                 \
  push %rbp;                                \
  mov %rsp, %rbp;                           \
  and $-16, %rsp;                           \
  call probecost_variant_probe##n;          \
  leave;                                    \
  ret;                                      \
  .size probecost_variant_tramp##n, . - probecost_variant_tramp##n

  .text
  .balign 16
TRAMP(0)
  .balign 16
TRAMP(1)
  .balign 16
TRAMP(3)
  .balign 16
TRAMP(6)

  .section .note.GNU-stack, "", @progbits
