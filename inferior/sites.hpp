#pragma once
// The probe sites of the inferior: one non-inlined extern "C" function per kind, so the tracer
// finds each by its ELF symbol and every mechanism pays the same call.
#include <cstdint>

extern "C" {
// Identical bodies: count the call. `probe` is where a tracer puts its int3; `plain` is the
// baseline's site (the same code, never touched).
void probecost_site_plain(std::uint64_t arg);
void probecost_site_probe(std::uint64_t arg);
// The probe site again, starting with a 5-byte NOP / with push %rax: for the kernel's uprobe,
// which emulates (or optimises) these and single-steps the probe site's first instruction.
void probecost_site_nop5(std::uint64_t arg);
void probecost_site_push(std::uint64_t arg);
// Carries PROBECOST_MARKER(kSiteEventId, arg): enabled or not at run time.
void probecost_site_marker(std::uint64_t arg);
// Carries a compiled-in int3: the 2006 measurement (with an in-process SIGTRAP handler).
void probecost_site_int3(std::uint64_t arg);

// 1,000 never-called 16-byte slots, each starting with a 5-byte NOP: where "many probes
// installed elsewhere" go (spares.S).
extern const char probecost_spare_sites[];
inline constexpr unsigned kSpareSites = 1000;
inline constexpr unsigned kSpareSiteBytes = 16;

// Sites whose first instruction is one chosen kind (kinds.S); see kind_names().
extern std::uint64_t probecost_kinds_checksum;
extern std::uint64_t probecost_kinds_slot;
}

namespace probecost::inferior {
// The instruction kinds of kinds.S, and the C-callable entry of each (null if unknown).
const char* const* kind_names();
void (*kind_entry(const char* name))(std::uint64_t);
inline constexpr std::uint32_t kSiteEventId = 1;
// Calls to any site by this thread: the inferior's own hit counter.
extern __thread std::uint64_t t_site_calls;
}  // namespace probecost::inferior
