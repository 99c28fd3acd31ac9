#pragma once
// C++ exception landing pads of an ELF module, from its .eh_frame and the LSDAs its FDEs point
// to (.gcc_except_table): places the unwinder jumps to without any branch instruction saying
// so. A jump patch over a landing pad's first byte but one would send the first `throw` that
// lands there into the middle of the jmp.
//
// The format is the LSB's (Linux Standard Base Core, "Exception Frames"): .eh_frame holds CIEs
// and FDEs; a CIE's augmentation string "zPLR" says how the FDE's pointers are encoded ('R')
// and that each FDE's augmentation data holds a pointer to its LSDA ('L'). The LSDA (GCC's
// except.c; the Itanium C++ ABI's "language-specific data area") starts with the landing pad
// base (LPStart, by default the function's start), the type table's offset, then the call-site
// table: {start, length, landing pad, action} per range of calls, a landing pad of 0 meaning
// none. Every field is bounds-checked: the bytes come from a file anyone may have written.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/address.hpp"

namespace probecost {

// Bytes of the module at the addresses the ELF file gives them (sh_addr).
struct LoadedBytes {
  FileAddr address;
  std::span<const std::uint8_t> bytes;
};

struct LandingPad {
  FileAddr pad;        // where the unwinder enters
  FileAddr call_site;  // the first call of the range whose exceptions land there
};

struct EhTables {
  std::vector<LandingPad> pads;  // sorted by pad
  // Functions (their FDE's range) whose LSDA could not be read: their landing pads are
  // unknown, and the reason for the first.
  std::vector<std::pair<FileAddr, FileAddr>> unknown;
  std::string why_unknown;
  std::size_t fdes = 0, lsdas = 0;
};

// `eh_frame`: the .eh_frame section. `sections`: the module's allocated sections, where the
// LSDAs are (.gcc_except_table). `absolute_ok`: an absolute pointer (DW_EH_PE_absptr, udata4)
// in the file is the address itself, true of an executable (ET_EXEC) only: in a shared object
// it waits for a dynamic relocation.
EhTables read_eh_tables(const LoadedBytes& eh_frame, std::span<const LoadedBytes> sections,
                        bool absolute_ok);

}  // namespace probecost
