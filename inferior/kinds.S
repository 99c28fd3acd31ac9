/* Probe sites whose first instruction is one chosen kind, for testing and benchmarking the
 * step-over strategies. For each KIND:
 *   probecost_call_KIND(uint64_t arg)  what the loop calls (C ABI)
 *   probecost_kind_KIND                where the tracer puts its int3 (the instruction of KIND)
 * Usually the same address; the jcc, pop and ret kinds need a few instructions first to set
 * flags or the stack. Every site adds something derived from `arg` (and, for sub, from the
 * flags it sets) to probecost_kinds_checksum, so a wrong emulation or relocation changes the
 * program's result or crashes it. */

#define SITE(k)                             \
  .globl probecost_call_##k;                \
  .type probecost_call_##k, @function;      \
  .globl probecost_kind_##k;                \
  .type probecost_kind_##k, @function;

#define ADD_RAX  lock addq %rax, probecost_kinds_checksum(%rip)
#define ADD_RDI  lock addq %rdi, probecost_kinds_checksum(%rip)

  .data
  .balign 8
  .globl probecost_kinds_checksum
probecost_kinds_checksum: .quad 0
  .globl probecost_kinds_slot
probecost_kinds_slot: .quad 0
probecost_kinds_value: .quad 7

  .text
  .balign 16
SITE(nop)
probecost_call_nop:
probecost_kind_nop:
  nop
  ADD_RDI
  ret

  .balign 16
SITE(nop5)
probecost_call_nop5:
probecost_kind_nop5:
  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00   /* nopl 0x0(%rax,%rax,1) */
  ADD_RDI
  ret

  .balign 16
SITE(endbr64)
probecost_call_endbr64:
probecost_kind_endbr64:
  endbr64
  ADD_RDI
  ret

  .balign 16
SITE(push)
probecost_call_push:
probecost_kind_push:
  push %rdi
  pop %rax
  ADD_RAX
  ret

  .balign 16
SITE(pop)
probecost_call_pop:
  push %rdi
probecost_kind_pop:
  pop %rax
  ADD_RAX
  ret

  .balign 16
SITE(mov)
probecost_call_mov:
probecost_kind_mov:
  mov %rdi, %rax
  ADD_RAX
  ret

  .balign 16
SITE(sub)
probecost_call_sub:
probecost_kind_sub:
  sub $0x18, %rsp            /* flags from this sub are checked below */
  seta %cl                   /* CF=0 and ZF=0: 1 */
  sets %dl                   /* SF: 0 on a user stack */
  mov %rdi, 8(%rsp)
  mov 8(%rsp), %rax
  add $0x18, %rsp
  movzbl %cl, %ecx
  movzbl %dl, %edx
  shl $8, %rdx
  add %rcx, %rax
  add %rdx, %rax
  ADD_RAX
  ret

  .balign 16
SITE(lea)
probecost_call_lea:
probecost_kind_lea:
  lea 5(%rdi,%rdi,2), %rax
  ADD_RAX
  ret

  .balign 16
SITE(lea_rip)
probecost_call_lea_rip:
probecost_kind_lea_rip:
  lea probecost_kinds_value(%rip), %rax
  mov (%rax), %rax
  add %rdi, %rax
  ADD_RAX
  ret

  .balign 16
SITE(load_rip)
probecost_call_load_rip:
probecost_kind_load_rip:
  mov probecost_kinds_value(%rip), %rax
  add %rdi, %rax
  ADD_RAX
  ret

  .balign 16
SITE(store_rip)
probecost_call_store_rip:
probecost_kind_store_rip:
  mov %rdi, probecost_kinds_slot(%rip)
  ADD_RDI
  ret

  .balign 16
SITE(jmp32)
probecost_call_jmp32:
probecost_kind_jmp32:
  .byte 0xe9                 /* jmp rel32 */
  .long 1f - . - 4
  ud2
  ud2
1:
  ADD_RDI
  ret

  .balign 16
SITE(jmp8)
probecost_call_jmp8:
probecost_kind_jmp8:
  .byte 0xeb, 1f - . - 1     /* jmp rel8 */
  ud2
1:
  ADD_RDI
  ret

  .balign 16
probecost_kinds_helper:
  ADD_RDI
  ret

  .balign 16
SITE(call)
probecost_call_call:
probecost_kind_call:
  call probecost_kinds_helper   /* call rel32 */
  ret

  .balign 16
SITE(jcc_taken)
probecost_call_jcc_taken:
  xor %eax, %eax             /* ZF=1 */
probecost_kind_jcc_taken:
  .byte 0x74, 1f - . - 1     /* jz rel8: taken */
  ud2
1:
  ADD_RDI
  ret

  .balign 16
SITE(jcc_not_taken)
probecost_call_jcc_not_taken:
  or $1, %eax                /* ZF=0 */
probecost_kind_jcc_not_taken:
  .byte 0x0f, 0x84           /* jz rel32: not taken */
  .long 1f - . - 4
  ADD_RDI
  ret
1:
  ud2

  .balign 16
SITE(ret)
probecost_call_ret:
  ADD_RDI
  call probecost_kind_ret
  ret
  .balign 16
probecost_kind_ret:
  ret

  .section .note.GNU-stack, "", @progbits
