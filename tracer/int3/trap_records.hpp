#pragma once
// Finding the trap areas (breakpoint/in_tracee/trap_area.hpp) a process holds, and the identity of
// the mapping a site is in: what restore, and trace's refusal of an occupied site, go by.
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "tracer/int3/file_identity.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

class TraceeMemory;

// Every trap area among `maps` (anonymous mappings that start with a valid header); an area
// that looks like one but does not parse is a note, with why.
std::vector<trap::ParsedArea> read_trap_areas(TraceeMemory& memory,
                                              const std::vector<Mapping>& maps,
                                              std::vector<std::string>& notes);

// Whose the int3 already at `at` in process `pid` is, for the refusal of a probe there: a
// probecost's that was killed (a trap area records it: then `probecost restore`), or someone
// else's breakpoint, which is not ours to touch.
std::string whose_int3(TraceeMemory& memory, const std::vector<Mapping>& maps, RuntimeAddr at,
                       pid_t pid);

// The installed record of `site` in `areas`, if there is one.
const trap::SiteRecord* record_of(const std::vector<trap::ParsedArea>& areas, RuntimeAddr site);

}  // namespace probecost
