#pragma once
// Which file, and where in it, an address of a mapping is: how the trap area's records and the
// semaphore table name the code a byte of ours went into. Its own library's (probecost-guard's
// loop, with the guard), apart from the trap areas' reading (trap_records.hpp), which pulls in
// the decoder the guard does without.
#include "breakpoint/in_tracee/trap_area.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

// The file, and the offset in it, of `at` in mapping `m` (device, inode: all zero for an
// anonymous mapping).
trap::FileIdentity file_identity(const Mapping& m, RuntimeAddr at);

}  // namespace probecost
