#pragma once
// Executing a displaced instruction out of line: a copy of it, fixed up for its new address,
// followed by a jump back to the instruction after the original, in a scratch page of the
// tracee. A thread stopped on the int3 resumes in the copy: one stop per hit, no single-step,
// and the int3 stays in place for every other thread.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/x86/copy_map.hpp"
#include "breakpoint/x86/decoder.hpp"
#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost {

// Maps an executable page in the tracee, as close to `near` as it can; returns its address, or
// nothing when no thread can be made to map it now (all running, or held in a group-stop).
// Error when the process refuses the mapping.
using ScratchMapper = std::function<std::optional<RuntimeAddr>(RuntimeAddr near)>;

inline constexpr std::size_t kPageSize = 4096;
inline constexpr std::size_t kSlotSize = 32;  // 15-byte instruction + 14-byte absolute jump

// Slot 0 of each scratch page is the mapper's: a header that tells a later release (detach, the
// next attach) that the page is still the one probecost mapped, not memory the program mapped
// where it was. The fields a release checks are those of the other areas (area_format.hpp).
inline constexpr char kScratchMagic[8] = {'p', 'r', 'o', 'b', 'e', 's', 'c', 'r'};
struct ScratchHeader {
  char magic[8];
  std::uint64_t area_address;
  std::uint32_t area_size;  // kPageSize
  std::int32_t tracer_pid;
  std::uint64_t pad;
};
static_assert(sizeof(ScratchHeader) == kSlotSize);

// The bytes of `in` relocated to run at `at`, followed by a jump back to in.next()
// (relocate_block() of one instruction).
// Empty with `why` set when the instruction cannot run elsewhere.
std::vector<std::uint8_t> relocate(const Instruction& in, RuntimeAddr at, std::string& why);

class Outliner {
 public:
  // `copies`, when given, learns where each copy runs (for the fix-up of a fault in one).
  Outliner(TraceeMemory& memory, ScratchMapper mapper, CopyMap* copies = nullptr)
      : memory_(&memory), mapper_(std::move(mapper)), copies_(copies) {}
  // Writes the relocated copy of `in` into a scratch slot; returns the slot, or nothing with
  // `why` set (for good, and for every later site, when the process refused a page). `later`
  // is set instead when no page can be mapped now.
  std::optional<RuntimeAddr> place(const Instruction& in, std::string& why, bool& later);
  // The pages mapped so far (to unmap them, or to recognise a PC inside one).
  const std::vector<RuntimeAddr>& pages() const { return pages_; }

 private:
  TraceeMemory* memory_;
  ScratchMapper mapper_;
  CopyMap* copies_;
  std::vector<RuntimeAddr> pages_;
  std::size_t used_ = kPageSize;  // of the last page
  std::string refused_;           // why the process refused a scratch page
};

}  // namespace probecost
