#pragma once
// The warm loop: a page of code that `record` has the process run once, at attach, to write
// every page of its call buffer from inside the process (tracer/jump/jump_probes_map.cpp says why a
// hypervisor with shadow page tables needs it). It runs as an injected call with a way back
// (tracer/core/way_back.hpp): its RBP points at a signal frame below the thread's stack, and it
// ends in `syscall; leave; ret`, which reaches libc's __restore_rt and the thread's own state.
//
// It lasts 100-250 ms on such a host. A probecost killed meanwhile leaves the thread in the
// loop, still writing the buffer: the next probecost that attaches (`restore`, or another
// `trace`/`record`) must take it the rest of its way back before it unmaps the buffer (which
// would kill the thread of SIGSEGV) or lends the thread's registers again (whose own way back
// frame would land on this one). So the page says what it is: a header in its first slot, as
// the step-over's scratch pages have, and the loop after it.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "breakpoint/int3/outline.hpp"
#include "common/address.hpp"

namespace probecost::warm {

inline constexpr char kMagic[8] = {'p', 'r', 'o', 'b', 'e', 'w', 'r', 'm'};
inline constexpr std::size_t kCodeOffset = sizeof(ScratchHeader);
// 1: lock orb $0,(%rdi); add $4096,%rdi; cmp %rsi,%rdi; jb 1b; syscall; leave; ret
inline constexpr std::uint8_t kLoop[] = {0xf0, 0x80, 0x0f, 0x00, 0x48, 0x81, 0xc7,
                                         0x00, 0x10, 0x00, 0x00, 0x48, 0x39, 0xf7,
                                         0x72, 0xf0, 0x0f, 0x05, 0xc9, 0xc3};
inline constexpr std::size_t kSyscallOffset = kCodeOffset + 16;
inline constexpr std::size_t kRetOffset = kCodeOffset + sizeof kLoop - 1;

// The bytes of the page mapped at `page` by probecost `tracer`: its header, then the loop.
std::vector<std::uint8_t> page_bytes(RuntimeAddr page, std::int32_t tracer);

// Whether `first` (the first kCodeOffset + sizeof kLoop bytes of the page at `page`) is a warm
// loop page of probecost's. The header and the code both: a program's page is never taken for one.
bool is_warm_page(std::span<const std::uint8_t> first, RuntimeAddr page);

// A thread found stopped in the loop of the page at `page`.
struct LoopStop {
  RuntimeAddr page;
  std::uint64_t rip, rsp, rbp;
};
// Its registers once the loop's `leave; ret` has run: the rest of its way back starts there, at
// __restore_rt with RSP at the frame's ucontext.
struct Rest {
  std::uint64_t rip, rsp, rbp;
};
// Where the two words the rest is made of lie: at RBP (the frame's saved RBP and its return
// address) before the `leave`, at RSP (the return address) at the `ret`. Nothing for a RIP
// outside the loop.
std::optional<std::uint64_t> words_at(const LoopStop& s);
std::optional<Rest> rest_of_way(const LoopStop& s, std::span<const std::uint64_t, 2> words);

}  // namespace probecost::warm
