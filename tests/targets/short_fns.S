/* short_target's functions: shorter than a 5-byte jmp, at a page's end and at the end of the
 * executable mapping, beside one a jump fits. Each has its ELF size (the planners decode the
 * whole function) and call frame information.
 *   short1(x)       `ret`, 1 byte: returns %rax, which call_short1(x) sets to x first
 *   short2(x)       `xchg %edi,%eax; ret`, 2 bytes: (unsigned) x
 *   short2_tail(x)  `jmp short4`, 2 bytes: a tail call, its entry its only exit
 *   short3(x)       `mov %edi,%eax; ret`, 3 bytes: (unsigned) x
 *   short4(x)       `lea 1(%rdi),%eax; ret`, 4 bytes: (unsigned) x + 1
 *   short4_mov(x)   `mov %rdi,%rax; ret`, 4 bytes: x
 *   page_end(x)     `lea 2(%rdi),%eax; ret`, 4 bytes ending at a page's end, after_page(x)
 *                   (x + 3) right after it on the next page
 *   map_end(x)      `mov %edi,%eax; ret`, 3 bytes ending where the executable mapping ends
 *                   (short_last.ld puts its section after .fini, the segment's last)
 *   big(x)          ((3x + 7) * 3 + 11) ^ 5: an entry jump and an exit jump of its own */
#define FUNC(name) .globl name; .type name, @function; name: .cfi_startproc
#define END(name) .cfi_endproc; .size name, . - name

  .text
  .balign 16
FUNC(call_short1)
  mov %rdi, %rax
  call short1
  ret
END(call_short1)

  .balign 16
FUNC(short1)
  ret
END(short1)

  .balign 16
FUNC(short2)
  xchg %edi, %eax
  ret
END(short2)

  .balign 16
FUNC(short2_tail)
  jmp .Lshort4              /* a local label: rel8, 2 bytes */
END(short2_tail)

  .balign 16
FUNC(short3)
  mov %edi, %eax
  ret
END(short3)

  .balign 16
FUNC(short4)
.Lshort4:
  lea 1(%rdi), %eax
  ret
END(short4)

  .balign 16
FUNC(short4_mov)
  mov %rdi, %rax
  ret
END(short4_mov)

  .balign 16
FUNC(big)
  lea 7(%rdi,%rdi,2), %rax  /* entry: 5 bytes */
  imul $3, %rax, %rax
  add $11, %rax
  xor $5, %rax              /* exit: xor (4) + ret */
  ret
END(big)

  .balign 4096
  .skip 4092, 0xcc
FUNC(page_end)
  lea 2(%rdi), %eax
  ret
END(page_end)
FUNC(after_page)
  lea 3(%rdi), %rax
  ret
END(after_page)

  .section short_last, "ax", @progbits
  .balign 4096
  .skip 4093, 0xcc
FUNC(map_end)
  mov %edi, %eax
  ret
END(map_end)

  .section .note.GNU-stack, "", @progbits
