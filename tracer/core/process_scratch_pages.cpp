// The out-of-line step-over's scratch pages (breakpoint/int3/outline.hpp): mapped with a header
// of ours in their first slot, and taken out at detach with the other mappings of ours, where
// no thread can be in them (our_mappings.hpp). Before, each attach that stepped out of line
// left its pages for good (+1 page, 4 KiB resident, per attach), as the kernel's uprobes leave
// their [uprobes] page.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "breakpoint/int3/outline.hpp"
#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

std::optional<RuntimeAddr> TracedProcess::map_scratch(RuntimeAddr near, Task* via) {
  // Within +-2 GiB of `near` (less a margin), so that a relocated RIP-relative operand and a
  // 5-byte jmp back both reach. MAP_FIXED_NOREPLACE: never clobber an existing mapping.
  constexpr std::uint64_t kReach = (1ull << 31) - (1ull << 20);
  auto hint = free_range_near(maps(), near, kPageSize, kReach);
  long flags = MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0);
  auto addr = calls_.syscall(SYS_mmap,
                             {static_cast<long>(hint ? hint->value() : 0),
                              static_cast<long>(kPageSize), PROT_READ | PROT_EXEC, flags, -1, 0},
                             via);
  if (!addr) return std::nullopt;
  if (*addr < 0 && *addr > -4096) {
    throw Error::from_errno("mmap of a scratch page in process " + std::to_string(pid_),
                            static_cast<int>(-*addr));
  }
  RuntimeAddr page(static_cast<std::uint64_t>(*addr));
  ScratchHeader h{};
  std::memcpy(h.magic, kScratchMagic, sizeof h.magic);
  h.area_address = page.value();
  h.area_size = kPageSize;
  h.tracer_pid = ::getpid();
  space_.add_scratch_page(page);
  space_.memory().write(page, {reinterpret_cast<const std::uint8_t*>(&h), sizeof h});
  return page;
}

}  // namespace probecost
