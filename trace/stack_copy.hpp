#pragma once
// A stopped thread's stack, copied (hit_book_stacks.cpp): for trace's int3 hits and record's int3
// entries, unwound by the snapshots' unwinder.
#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace probecost::trace_run {

// [sp, sp + bytes) of thread `tid` into `out` (resized to what could be read: the readable
// pages up to the first that is not, the stack's end). Our read: the tracee is not touched.
void read_stack(pid_t tid, std::uint64_t sp, std::uint32_t bytes, std::vector<std::uint8_t>& out);

}  // namespace probecost::trace_run
