/* Hand-written assembly that a relocated copy or a trampoline must get exactly right: status
 * flags live at a function's entry and across a call, DF set, the red zone in use,
 * RIP-relative operands (with an immediate after the displacement, SSE, push), VEX and EVEX
 * (called only where the CPU has them), lock, rep string instructions (with a zero count
 * too), `ret imm16`, enter/leave, loop/jrcxz, short branches, a branch into a would-be patch
 * range, an indirect jump, a tail jump, a system call. asm_main.c calls them. */
#define FUNC(name) .globl name; .type name, @function; name:
#define END(name) .size name, .-name

  .data
  .balign 64
riprel_q:   .quad 0x1122334455667788
riprel_d:   .long 0x12345
  .balign 16
riprel_v:   .long 1, 2, 3, 4
riprel_w:   .long 10, 20, 30, 40
riprel_out: .long 0, 0, 0, 0
riprel_slot: .quad t_jump_target
lock_counter: .long 0
  .balign 64
vec_add:    .long 1, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53

  .text
/* rax = x + the caller's CF: reads a status flag nobody set in this function. */
FUNC(t_flags_entry)
  mov %rdi, %rax
  adc $0, %rax
  ret
END(t_flags_entry)

/* rax = x + the caller's OF. */
FUNC(t_of_entry)
  mov %rdi, %rax
  seto %dl
  movzbl %dl, %edx
  add %rdx, %rax
  ret
END(t_of_entry)

/* t_flags_caller(x, a, b): CF = a < b (unsigned) into t_flags_entry, OF of a + b (signed) into
 * t_of_entry; the flags stay live across each call. */
FUNC(t_flags_caller)
  push %rbx
  mov %rdx, %rbx
  cmp %rbx, %rsi
  call t_flags_entry
  mov %rax, %r8
  mov %rsi, %rcx
  add %rbx, %rcx
  mov %r8, %rdi
  call t_of_entry
  pop %rbx
  ret
END(t_flags_caller)

/* Flags set before the probe sites and read after them. */
FUNC(t_flags_mid)
  xor %eax, %eax
  cmp %rsi, %rdi
  lea 7(%rdi), %rdx
  mov %rdx, %rcx
  nop
  jb 1f
  add $100, %rax
1:
  adc %rcx, %rax
  seto %dl
  add %rdx, %rax
  ret
END(t_flags_mid)

/* Copies n bytes backwards with DF set: rep movsb runs with DF = 1 wherever it runs. */
FUNC(t_df_copy)
  lea -1(%rsi,%rdx), %rsi
  lea -1(%rdi,%rdx), %rdi
  mov %rdx, %rcx
  std
  nop
  rep movsb
  cld
  mov %rcx, %rax
  ret
END(t_df_copy)

/* A leaf that keeps its data in the whole red zone, below %rsp. */
FUNC(t_redzone)
  mov %rdi, -8(%rsp)
  lea 1(%rdi), %rax
  mov %rax, -16(%rsp)
  mov %rdi, -128(%rsp)
  movq $0x1234, -64(%rsp)
  add -8(%rsp), %rax
  xor -16(%rsp), %rax
  add -128(%rsp), %rax
  add -64(%rsp), %rax
  ret
END(t_redzone)

FUNC(t_riprel)
  mov riprel_q(%rip), %rax
  add %rdi, %rax
  mov %rax, riprel_q(%rip)
  cmpl $0x12345, riprel_d(%rip)
  sete %cl
  movzbl %cl, %ecx
  addl $7, riprel_d(%rip)
  lea riprel_v(%rip), %rdx
  movdqa (%rdx), %xmm0
  paddd riprel_w(%rip), %xmm0
  movdqa %xmm0, riprel_out(%rip)
  incq riprel_q(%rip)
  pushq riprel_q(%rip)
  pop %r8
  add %r8, %rax
  add %rcx, %rax
  movzbl riprel_out+4(%rip), %ecx
  add %rcx, %rax
  ret
END(t_riprel)

/* An indirect jump through a RIP-relative slot. */
FUNC(t_riprel_jmp)
  mov %rdi, %rax
  shl $1, %rax
  jmp *riprel_slot(%rip)
END(t_riprel_jmp)

FUNC(t_jump_target)
  add $3, %rax
  ret
END(t_jump_target)

/* t_avx2_sum(int v[8]): VEX, RIP-relative, one with an immediate after the displacement. */
FUNC(t_avx2_sum)
  vmovdqu (%rdi), %ymm0
  vpaddd vec_add(%rip), %ymm0, %ymm0
  vpshufd $0x1b, vec_add(%rip), %ymm1
  vpxor %ymm1, %ymm0, %ymm0
  vmovdqu %ymm0, (%rdi)
  vextracti128 $1, %ymm0, %xmm2
  vpaddd %xmm2, %xmm0, %xmm0
  vmovd %xmm0, %eax
  vzeroupper
  ret
END(t_avx2_sum)

/* t_avx512_sum(int v[32]): EVEX, RIP-relative, masked, a compressed disp8. */
FUNC(t_avx512_sum)
  vmovdqu32 (%rdi), %zmm0
  vpaddd vec_add(%rip), %zmm0, %zmm0
  mov $0x5555, %eax
  kmovw %eax, %k1
  vpaddd 64(%rdi), %zmm0, %zmm0{%k1}
  vpshufd $0x1b, vec_add(%rip), %zmm1
  vpxord %zmm1, %zmm0, %zmm0
  vmovdqu32 %zmm0, (%rdi)
  vextracti32x4 $3, %zmm0, %xmm2
  vmovd %xmm2, %eax
  vzeroupper
  ret
END(t_avx512_sum)

/* t_lock(uint64_t q[4]) */
FUNC(t_lock)
  mov $5, %eax
  lock xadd %rax, (%rdi)
  lock incq 8(%rdi)
  mov 8(%rdi), %rcx
  mov %rcx, %rdx
  add $1, %rdx
  mov %rcx, %rax
  lock cmpxchg %rdx, 8(%rdi)
  lock orq $0x10, 16(%rdi)
  lock btsq $3, 24(%rdi)
  setc %cl
  movzbl %cl, %ecx
  mov $7, %edx
  xchg %rdx, 16(%rdi)
  lock incl lock_counter(%rip)
  add %rdx, %rax
  add %rcx, %rax
  mov lock_counter(%rip), %edx
  add %rdx, %rax
  ret
END(t_lock)

FUNC(t_rep_movsb)
  mov %rdx, %rcx
  rep movsb
  mov %rcx, %rax
  ret
END(t_rep_movsb)

FUNC(t_rep_stosq)
  mov %rsi, %rax
  mov %rdx, %rcx
  rep stosq
  lea (%rcx,%rdi), %rax
  ret
END(t_rep_stosq)

/* 1 + what is left when a and b differ within n bytes; 0 when equal (n may be 0). */
FUNC(t_repe_cmpsb)
  mov %rdx, %rcx
  xor %eax, %eax
  repe cmpsb
  setne %al
  add %rcx, %rax
  ret
END(t_repe_cmpsb)

FUNC(t_repne_scasb)
  xor %eax, %eax
  mov $-1, %rcx
  repne scasb
  not %rcx
  dec %rcx
  mov %rcx, %rax
  ret
END(t_repne_scasb)

/* Called with one 8-byte argument on the stack, which it pops itself. */
FUNC(t_ret_imm)
  mov 8(%rsp), %rax
  add %rdi, %rax
  imul $3, %rax, %rax
  ret $8
END(t_ret_imm)

FUNC(t_ret_imm_caller)
  push %rsi
  call t_ret_imm
  add $1, %rax
  ret
END(t_ret_imm_caller)

FUNC(t_enter_leave)
  enter $32, $0
  mov %rdi, -8(%rbp)
  mov -8(%rbp), %rax
  add $5, %rax
  leave
  ret
END(t_enter_leave)

/* Sum of n, n-1, ..., 1 with loop and jrcxz (short branches with no 32-bit form). */
FUNC(t_loop)
  xor %eax, %eax
  mov %rdi, %rcx
  jrcxz 2f
1:
  add %rcx, %rax
  loop 1b
2:
  ret
END(t_loop)

/* The back edge lands on the second instruction: a jump over the nop would cover it. */
FUNC(t_branch_into)
  xor %eax, %eax
  mov %rdi, %rcx
  nop
1:
  inc %rax
  dec %rcx
  jnz 1b
  ret
END(t_branch_into)

/* Short conditional branches, relocated to their 32-bit forms. */
FUNC(t_jcc_chain)
  mov %rdi, %rax
  test $1, %al
  jz 1f
  add $3, %rax
1:
  test $2, %al
  jnz 2f
  sub $1, %rax
2:
  ret
END(t_jcc_chain)

FUNC(t_tail_target)
  lea 2(%rdi), %rax
  ret
END(t_tail_target)

FUNC(t_tailjmp)
  add $5, %rdi
  jmp t_tail_target
END(t_tailjmp)

FUNC(t_call_middle)
  push %rbx
  mov %rdi, %rbx
  call t_tail_target
  add %rbx, %rax
  pop %rbx
  ret
END(t_call_middle)

/* t_misc(x, y > 0) */
FUNC(t_misc)
  endbr64
  push %rbx
  pushfq
  mov %rdi, %rax
  bswap %rax
  mov %rax, %r9
  mov %rdi, %rax
  cqo
  idiv %rsi
  xchg %r9, %rdx
  test %rax, %rax
  cmovs %r9, %rax
  xor %rdx, %rax
  bt $5, %rdi
  setc %bl
  movzbl %bl, %ebx
  add %rbx, %rax
  nopw 0(%rax,%rax,1)
  xchg %ax, %ax
  popfq
  pop %rbx
  ret
END(t_misc)

FUNC(t_push_pop)
  push %rdi
  push $5
  pop %rax
  pop %rcx
  add %rcx, %rax
  push %rax
  pop %rdx
  lea (%rdx,%rdx,2), %rax
  ret
END(t_push_pop)

/* getpid, its result dropped: a system call among the probe sites. */
FUNC(t_syscall)
  mov $39, %eax
  syscall
  lea 1(%rdi), %rax
  ret
END(t_syscall)

  .section .note.GNU-stack, "", @progbits
