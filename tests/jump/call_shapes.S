/* Functions of known shapes for call probes (entry and every exit, breakpoint/jump/exit_plan.hpp),
 * written out so that the planner's every case is there whatever the compiler does. Each has its
 * ELF size: the planner decodes the whole function. C ABI, integer arguments.
 *
 *   shape_leaf(a, b)        a + b; short: patched whole, entry and ret in one patch
 *   shape_two_exits(x)      x >= 0 ? x + 1 : -x, two rets, each with its own patch
 *   shape_tail(a, b)        a + 1 + b: a tail call (jmp rel32) to shape_leaf, patched whole
 *   shape_cond_tail(a, b)   a >= 100 ? shape_leaf(a, b) : a + 1: a conditional tail call (jae)
 *   shape_fact(n)           n!, recursive; two exits, one right after its call returns
 *   shape_flags(x)          returns the caller's CF: the flags must survive entry and exit
 *   shape_short_exit(a, b)  shape_leaf(a, b): `push; mov; call` and `call; pop; ret`: int3 both
 *   shape_entered_exit(x)   a branch to the ret itself: int3 exit
 *   shape_call_flags(x)     shape_flags with CF = x & 1
 *   shape_switch(x)         an indirect jump: no patch anywhere, every exit int3
 *   shape_five(a, b, c)     (a * b + c) >> 1 in 5 instructions: an entry patch and an exit
 *                           patch (probecost-jump-bench's function); shape_five_plain, the same
 *                           never patched */

#define FUNC(name) .globl name; .type name, @function; .balign 16; name:
#define END(name) .size name, . - name

  .text
FUNC(shape_leaf)
  lea (%rdi,%rsi), %rax          /* 4 bytes, + ret = 5: one patch over the whole function */
  ret
END(shape_leaf)

FUNC(shape_two_exits)
  sub $8, %rsp                   /* entry: sub (4) + mov (3) */
  mov %rdi, %rax
  test %rdi, %rdi
  js 1f
  add $1, %rax
  add $8, %rsp                   /* exit 1: add (4) + ret */
  ret
1:
  neg %rax
  add $8, %rsp                   /* exit 2: add (4) + ret */
  ret
END(shape_two_exits)

FUNC(shape_tail)
  add $1, %rdi                   /* 4 bytes, then the tail call: patched whole */
  jmp shape_leaf
END(shape_tail)

FUNC(shape_cond_tail)
  cmp $100, %rdi                 /* 4 bytes, then the conditional tail call (6): patched whole */
  jae shape_leaf_far
  lea 1(%rdi), %rax              /* exit 2: lea (4) + ret */
  ret
END(shape_cond_tail)

FUNC(shape_fact)
  endbr64                        /* entry: endbr64 (4) + push (1) */
  push %rbx
  mov %rdi, %rbx
  cmp $1, %rdi
  ja 2f
  mov $1, %eax                   /* exit 1: mov (5) + pop + ret */
  pop %rbx
  ret
2:
  lea -1(%rdi), %rdi
  call shape_fact
  imul %rbx, %rax                /* exit 2: from the return address, imul (4) + pop + ret */
  pop %rbx
  ret
END(shape_fact)

FUNC(shape_flags)
  mov $0, %eax                   /* entry: mov (5); the flags untouched */
  setc %al                       /* the caller's CF */
  nop
  nop
  nop
  ret                            /* exit: setc (3) + 3 nops + ret, over the setc */
END(shape_flags)

FUNC(shape_short_exit)
  push %rbx                      /* entry: push (1) + mov (3) + call: refused, int3 */
  mov %rdi, %rbx
  call shape_leaf
  pop %rbx                       /* exit: pop + ret from the return address, 2 bytes: int3 */
  ret
END(shape_short_exit)

FUNC(shape_entered_exit)
  mov %rdi, %rax                 /* entry: mov (3) + test (3) */
  test %rdi, %rdi
  je 1f
  add $1, %rax
  nop
1:
  ret                            /* exit: `je` lands on the ret itself: int3 */
END(shape_entered_exit)

/* CF = bit 0 of x, then shape_flags: what it returns is the CF it found. */
FUNC(shape_call_flags)
  sub $8, %rsp
  bt $0, %rdi
  call shape_flags
  add $8, %rsp
  ret
END(shape_call_flags)

FUNC(shape_switch)
  lea 1f(%rip), %rax             /* an indirect jump: no patch in this function */
  jmp *%rax
1:
  mov %rdi, %rax
  ret
END(shape_switch)

FUNC(shape_five)
  mov %rdi, %rax                 /* entry: mov (3) + imul (4) */
  imul %rsi, %rax
  add %rdx, %rax                 /* exit: add (3) + shr (3) + ret */
  shr $1, %rax
  ret
END(shape_five)

FUNC(shape_five_plain)
  mov %rdi, %rax
  imul %rsi, %rax
  add %rdx, %rax
  shr $1, %rax
  ret
END(shape_five_plain)

/* Far from shape_cond_tail's jae in no way but its name: a conditional tail call's target. */
FUNC(shape_leaf_far)
  lea (%rdi,%rsi), %rax
  ret
END(shape_leaf_far)

  .section .note.GNU-stack, "", @progbits
