/* Probe sites whose first instruction is one chosen kind, for testing and benchmarking the
 * step-over strategies and jump-patched probes. For each KIND:
 *   probecost_call_KIND(uint64_t arg)  what the loop calls (C ABI)
 *   probecost_kind_KIND                where the tracer puts its int3 (the instruction of KIND)
 * Usually the same address; the jcc, pop and ret kinds need a few instructions first to set
 * flags or the stack. Every site adds something derived from `arg` (and, for sub, from the
 * flags it sets) to probecost_kinds_checksum, so a wrong emulation or relocation changes the
 * program's result or crashes it. Each probecost_call_KIND has its ELF size (END), which a jump
 * patch needs: it decodes the whole function. The kinds after `ret` are there for jump patches:
 * first 5 bytes over several instructions, flags live across the site, a red zone in use, and
 * sites a jump must refuse (a branch into the range, too short, a syscall, an indirect jump). */

#define SITE(k)                             \
  .globl probecost_call_##k;                \
  .type probecost_call_##k, @function;      \
  .globl probecost_kind_##k;                \
  .type probecost_kind_##k, @function;

#define END(k) .size probecost_call_##k, . - probecost_call_##k;

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
  END(nop)

  .balign 16
SITE(nop5)
probecost_call_nop5:
probecost_kind_nop5:
  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00   /* nopl 0x0(%rax,%rax,1) */
  ADD_RDI
  ret
  END(nop5)

  .balign 16
SITE(endbr64)
probecost_call_endbr64:
probecost_kind_endbr64:
  endbr64
  ADD_RDI
  ret
  END(endbr64)

  .balign 16
SITE(push)
probecost_call_push:
probecost_kind_push:
  push %rdi
  pop %rax
  ADD_RAX
  ret
  END(push)

  .balign 16
SITE(pop)
probecost_call_pop:
  push %rdi
probecost_kind_pop:
  pop %rax
  ADD_RAX
  ret
  END(pop)

  .balign 16
SITE(mov)
probecost_call_mov:
probecost_kind_mov:
  mov %rdi, %rax
  ADD_RAX
  ret
  END(mov)

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
  END(sub)

  .balign 16
SITE(lea)
probecost_call_lea:
probecost_kind_lea:
  lea 5(%rdi,%rdi,2), %rax
  ADD_RAX
  ret
  END(lea)

  .balign 16
SITE(lea_rip)
probecost_call_lea_rip:
probecost_kind_lea_rip:
  lea probecost_kinds_value(%rip), %rax
  mov (%rax), %rax
  add %rdi, %rax
  ADD_RAX
  ret
  END(lea_rip)

  .balign 16
SITE(load_rip)
probecost_call_load_rip:
probecost_kind_load_rip:
  mov probecost_kinds_value(%rip), %rax
  add %rdi, %rax
  ADD_RAX
  ret
  END(load_rip)

  .balign 16
SITE(store_rip)
probecost_call_store_rip:
probecost_kind_store_rip:
  mov %rdi, probecost_kinds_slot(%rip)
  ADD_RDI
  ret
  END(store_rip)

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
  END(jmp32)

  .balign 16
SITE(jmp8)
probecost_call_jmp8:
probecost_kind_jmp8:
  .byte 0xeb, 1f - . - 1     /* jmp rel8 */
  ud2
1:
  ADD_RDI
  ret
  END(jmp8)

  .balign 16
probecost_kinds_helper:
  ADD_RDI
  ret
  .size probecost_kinds_helper, . - probecost_kinds_helper

  .balign 16
SITE(call)
probecost_call_call:
probecost_kind_call:
  call probecost_kinds_helper   /* call rel32 */
  ret
  END(call)

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
  END(jcc_taken)

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
  END(jcc_not_taken)

  .balign 16
SITE(ret)
probecost_call_ret:
  ADD_RDI
  call probecost_kind_ret
  ret
  END(ret)

  .balign 16
probecost_kind_ret:
  ret
  .size probecost_kind_ret, . - probecost_kind_ret

/* The first 5 bytes span three instructions: a frame pointer prologue. */
  .balign 16
SITE(frame)
probecost_call_frame:
probecost_kind_frame:
  push %rbp
  mov %rsp, %rbp
  mov %rdi, %rax
  pop %rbp
  ADD_RAX
  ret
  END(frame)

/* Flags set before the site and read after it: ZF, SF, OF and CF from the cmp go into the sum. */
  .balign 16
SITE(flags)
probecost_call_flags:
  cmp $5, %rdi
probecost_kind_flags:
  mov %rdi, %rax             /* the patch covers these two movs, which keep the flags */
  mov %rdi, %rsi
  setl %cl
  setz %dl
  setb %r8b
  movzbl %cl, %ecx
  movzbl %dl, %edx
  movzbl %r8b, %r8d
  shl $8, %rcx
  shl $9, %rdx
  shl $10, %r8
  add %rcx, %rax
  add %rdx, %rax
  add %r8, %rax
  ADD_RAX
  ret
  END(flags)

/* A leaf function with data in its red zone (below %rsp) across the site, and flags live: a
 * trampoline that pushed without stepping over the red zone would change the sum. */
  .balign 16
SITE(redzone)
probecost_call_redzone:
  mov %rdi, -8(%rsp)
  mov %rdi, -128(%rsp)
  test %rdi, %rdi
probecost_kind_redzone:
  mov %rdi, %rax
  mov %rdi, %rdx
  setz %cl
  cmp -8(%rsp), %rdx
  jne 1f
  cmp -128(%rsp), %rdx
  jne 1f
  movzbl %cl, %ecx
  add %rcx, %rax
  ADD_RAX
1:
  ret
  END(redzone)

/* A loop whose back edge goes to site+1: inside the bytes a jump would replace. */
  .balign 16
SITE(branch_in)
probecost_call_branch_in:
  mov $2, %ecx
  xor %eax, %eax
probecost_kind_branch_in:
  nop
1:
  add %rdi, %rax
  dec %ecx
  jnz 1b
  ADD_RAX
  ret
  END(branch_in)

/* Entered after its first instruction from another function, as glibc's
   __mempcpy_avx_unaligned_erms enters __memmove_avx_unaligned_erms: the function alone looks
   patchable; only a scan of the whole module sees the branch. */
  .balign 16
SITE(outside_in)
probecost_call_outside_in:
probecost_kind_outside_in:
  mov %rdi, %rax
probecost_kinds_outside_in_body:
  add $1, %rax
  ADD_RAX
  ret
  END(outside_in)
  .balign 16
probecost_kinds_outside_in_other:
  mov %rdi, %rax
  jmp probecost_kinds_outside_in_body
  .size probecost_kinds_outside_in_other, . - probecost_kinds_outside_in_other

/* 4 bytes, ending in a tail jump: too short for a 5-byte jump. */
  .balign 16
probecost_kinds_short_helper:
  ADD_RDI
  ret
  .size probecost_kinds_short_helper, . - probecost_kinds_short_helper
SITE(short)
probecost_call_short:
probecost_kind_short:
  xchg %ax, %ax              /* 2-byte nop */
  .byte 0xeb, probecost_kinds_short_helper - . - 1   /* jmp rel8 */
  END(short)

/* A system call within the first 5 bytes (getpid). */
  .balign 16
SITE(syscall)
probecost_call_syscall:
probecost_kind_syscall:
  push $39
  pop %rax
  syscall
  ADD_RDI
  ret
  END(syscall)

/* An indirect jump in the function: where it may go is unknown to a decoder. */
  .balign 16
SITE(indirect)
probecost_call_indirect:
probecost_kind_indirect:
  lea 1f(%rip), %rax
  jmp *%rax
1:
  ADD_RDI
  ret
  END(indirect)

  .section .note.GNU-stack, "", @progbits
