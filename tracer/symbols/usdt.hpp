#pragma once
// USDT probes: the static markers programs ship, as systemtap's <sys/sdt.h> writes them. Each
// marker is a `nop` in the code and an ELF note in `.note.stapsdt` (owner "stapsdt", type 3):
// the nop's address, the link-time address of `.stapsdt.base` (prelink may move the file, the
// section tells by how much), the address of the probe's semaphore (0: none) and three
// strings, provider, name and the argument specs ("8@%rbp -4@%eax -4@112(%rsp)"). bpftrace
// (`usdt:`), perf (`sdt_`) and SystemTap read the same notes.
//
// A semaphore is an unsigned short the program reads before it computes the arguments: the
// argument code runs only while it is non-zero. Every tracer adds one while attached and takes
// it away when it leaves (the kernel's uprobe does so for bpftrace: ref_ctr_offset).
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/address.hpp"

typedef struct Elf Elf;

namespace probecost {

class ProcessSymbols;

struct UsdtProbe {
  std::string module;  // path of the ELF file
  std::string provider, name;
  RuntimeAddr address;                   // the nop
  std::optional<RuntimeAddr> semaphore;  // the unsigned short the program reads
  std::string args;                      // the note's argument specs, as written
};

// Every USDT probe in the notes of `elf` (path `module`), located for a load bias `bias`.
// Malformed notes are skipped (the file is not the tracee's to trust, but reading it must not
// fail a trace of the others).
std::vector<UsdtProbe> read_usdt_notes(Elf* elf, std::int64_t bias, const std::string& module);

// Every USDT probe of every module the process has loaded now (executable first).
std::vector<UsdtProbe> usdt_probes(const ProcessSymbols& symbols);

// `usdt:PROVIDER:NAME` or `usdt:MODULE:PROVIDER:NAME`, as bpftrace and perf users write them;
// PROVIDER and NAME may be globs (`usdt:python:*`). MODULE as for any probe (a file name, a
// SONAME or a path; empty: every module).
struct UsdtSpec {
  std::string module, provider, name;
};
bool is_usdt_spec(const std::string& text);
// UsageError on a malformed one.
UsdtSpec parse_usdt_spec(const std::string& text);

// The probes of `symbols` that `spec` names (in modules that has_module matches).
std::vector<UsdtProbe> find_usdt(const UsdtSpec& spec, const ProcessSymbols& symbols);
// The probes `spec` names, or a CannotProbe that names the process and the providers it has.
std::vector<UsdtProbe> resolve_usdt(const std::string& text, const ProcessSymbols& symbols,
                                    pid_t pid);

// "python (function__entry, line, ...), libstdcxx (catch, throw)", or "none".
std::string usdt_providers(const std::vector<UsdtProbe>& probes);

// "usdt:/usr/bin/python3.11:python:line", the form bpftrace -l prints.
std::string usdt_name(const UsdtProbe& p);

}  // namespace probecost
