#include "breakpoint/in_tracee/stack_record.hpp"

#include <algorithm>
#include <cstring>

#include "common/error.hpp"

namespace probecost::jump {

const char* bound_name(SnapshotBound b) {
  switch (b) {
    case SnapshotBound::Bounded:
      return "bounded";
    case SnapshotBound::UnknownThread:
      return "a thread probecost did not see start (no stack bounds)";
    case SnapshotBound::OffStack:
      return "off its thread's stack (an alternate signal stack or a coroutine's)";
    case SnapshotBound::DirectionFlag:
      return "the direction flag set at the site";
  }
  return "?";
}

std::uint32_t snapshot_record_size(std::uint32_t stack_bytes) {
  if (stack_bytes < kMinStackBytes || stack_bytes > kMaxStackBytes)
    throw Error("--stack-size: " + std::to_string(kMinStackBytes) + " to " +
                std::to_string(kMaxStackBytes) + " bytes");
  std::uint32_t size = 256;
  while (size < kSnapshotHeader + stack_bytes) size *= 2;
  return size;
}

StackSnapshot decode_snapshot(std::span<const std::uint8_t> record) {
  std::uint64_t w[11];
  std::memcpy(w, record.data(), sizeof w);
  StackSnapshot s;
  s.tsc = w[0];
  s.tp = w[1];
  s.sp = w[2] & ((1ull << 48) - 1);
  s.id = static_cast<std::uint32_t>((w[2] >> 48) & 0x7fff);
  s.rip = w[3];
  s.rbp = w[4];
  s.rbx = w[5];
  s.r12 = w[6];
  s.r13 = w[7];
  s.r14 = w[8];
  s.r15 = w[9];
  auto bound = static_cast<std::uint8_t>(w[10] >> 32);
  s.bound = bound <= 3 ? static_cast<SnapshotBound>(bound) : SnapshotBound::UnknownThread;
  std::size_t room = record.size() - kSnapshotHeader;
  std::size_t copied = std::min<std::size_t>(static_cast<std::uint32_t>(w[10]), room);
  if (s.bound != SnapshotBound::Bounded) copied = 0;
  s.stack = record.subspan(kSnapshotHeader, copied);
  return s;
}

std::uint64_t* ThreadTable::entry(std::uint32_t slot) const {
  return reinterpret_cast<std::uint64_t*>(table_.data() + std::size_t{slot} * kThreadEntry);
}

// The trampoline reads tp, then lo and hi: lo and hi are stored before tp (x86 keeps stores in
// order), so a thread that sees its tp sees its bounds.
bool ThreadTable::enter(std::uint64_t tp, std::uint64_t lo, std::uint64_t hi) {
  std::uint32_t first = thread_slot(tp);
  std::uint64_t* free_slot = nullptr;
  for (std::uint32_t i = 0; i < kThreadProbe; ++i) {
    std::uint64_t* e = entry(first + i);
    std::uint64_t now = __atomic_load_n(&e[0], __ATOMIC_RELAXED);
    if (now == tp) {
      free_slot = e;
      break;
    }
    if (!now && !free_slot) free_slot = e;
  }
  if (!free_slot) return false;
  __atomic_store_n(&free_slot[0], 0, __ATOMIC_RELEASE);
  __atomic_store_n(&free_slot[1], lo, __ATOMIC_RELAXED);
  __atomic_store_n(&free_slot[2], hi, __ATOMIC_RELAXED);
  __atomic_store_n(&free_slot[0], tp, __ATOMIC_RELEASE);
  return true;
}

void ThreadTable::forget(std::uint64_t tp) {
  std::uint32_t first = thread_slot(tp);
  for (std::uint32_t i = 0; i < kThreadProbe; ++i) {
    std::uint64_t* e = entry(first + i);
    if (__atomic_load_n(&e[0], __ATOMIC_RELAXED) == tp)
      __atomic_store_n(&e[0], 0, __ATOMIC_RELEASE);
  }
}

}  // namespace probecost::jump
