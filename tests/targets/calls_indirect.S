/* calls_target's functions that leave, or do not, by a jump through a register or memory:
 * the tail calls a compiler makes through a function pointer or the GOT, and a switch's jump
 * table, which only the target at run time tells apart.
 *   reg_tail(x)    leaf(x + 1), by `jmp *%r11`
 *   slot_tail(x)   leaf(x + 2), by `jmp *leaf_slot(%rip)` (as through the GOT)
 *   table_tail(x)  one `jmp *(%rax,%rdx,8)`: x odd, a tail call to leaf(x); x even, to its own
 *                  `ret` of x + 1
 *   switch4(x)     x + 10 * (x % 4 + 1), through a jump table of GCC's shape (offsets in
 *                  .rodata, `jmp *%rax`): every target inside the function */
#define FUNC(name) .globl name; .type name, @function; .balign 16; name: .cfi_startproc
#define END(name) .cfi_endproc; .size name, . - name

  .text
FUNC(reg_tail)
  add $1, %rdi
  lea leaf(%rip), %r11
  jmp *%r11
END(reg_tail)

FUNC(slot_tail)
  add $2, %rdi
  jmp *leaf_slot(%rip)
END(slot_tail)

FUNC(table_tail)
  lea tail_table(%rip), %rax
  mov %rdi, %rdx
  and $1, %edx
  jmp *(%rax,%rdx,8)
.Ltable_tail_ret:
  lea 1(%rdi), %rax
  ret
END(table_tail)

FUNC(switch4)
  mov %rdi, %rax
  and $3, %eax
  lea .Lswitch4_table(%rip), %rdx
  movslq (%rdx,%rax,4), %rax
  add %rdx, %rax
  jmp *%rax
.Lcase0:
  lea 10(%rdi), %rax
  ret
.Lcase1:
  lea 20(%rdi), %rax
  ret
.Lcase2:
  lea 30(%rdi), %rax
  ret
.Lcase3:
  lea 40(%rdi), %rax
  ret
END(switch4)

  .section .rodata
  .balign 4
.Lswitch4_table:
  .long .Lcase0 - .Lswitch4_table, .Lcase1 - .Lswitch4_table
  .long .Lcase2 - .Lswitch4_table, .Lcase3 - .Lswitch4_table

  .section .data.rel.ro, "aw"
  .balign 8
leaf_slot:
  .quad leaf
tail_table:
  .quad .Ltable_tail_ret, leaf

  .section .note.GNU-stack, "", @progbits
