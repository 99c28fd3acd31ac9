#pragma once
// restore's part for the USDT semaphores a killed probecost raised: read from the table it kept
// in the process (breakpoint/in_tracee/semaphore_table.hpp), each lowered by the one it raised,
// where the table's record still says raised (neither probecost nor its guardian lowered it),
// the probe's site still holds probecost's bytes (its library was not replaced since), the
// mapping is still the file's data it was raised in, and the value is not zero.
#include <functional>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/semaphore_table.hpp"
#include "restore/restore.hpp"
#include "tracer/core/our_mappings.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

class TraceeMemory;

// Every semaphore table among `maps`: anonymous read-only mappings with our header at one of
// their pages (two tables mapped side by side are one mapping); one that looks like a table
// but does not parse is a note, with why.
std::vector<sema::ParsedTable> read_semaphore_tables(TraceeMemory& memory,
                                                     const std::vector<Mapping>& maps,
                                                     std::vector<std::string>& notes);

// Whether the probe site at an address still holds the bytes probecost wrote there.
using HoldsProbe = std::function<bool(RuntimeAddr site)>;

// Lowers what `tables` say was raised and not lowered (every thread of the process stopped),
// reported in report.semaphores; each table then goes to `into`, to be unmapped with the areas.
void restore_semaphores(TraceeMemory& memory, const std::vector<Mapping>& maps,
                        const std::vector<sema::ParsedTable>& tables, const HoldsProbe& holds,
                        bool dry_run, RestoreReport& report, OurMappings& into);

}  // namespace probecost
