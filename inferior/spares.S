/* probecost_spare_sites: 1,000 slots of 16 bytes that nothing calls, each a 5-byte NOP and a
 * ret, padded with int3. A tracer or the kernel's uprobe installs probes here to measure what
 * many installed probes cost a hit elsewhere (`probecost experiment multi-probe`). */
  .text
  .balign 16
  .globl probecost_spare_sites
  .type probecost_spare_sites, @function
probecost_spare_sites:
  .rept 1000
  .byte 0x0f, 0x1f, 0x44, 0x00, 0x00
  ret
  .balign 16, 0xcc
  .endr
  .size probecost_spare_sites, . - probecost_spare_sites

  .section .note.GNU-stack, "", @progbits
