#pragma once
// One int3 breakpoint site in a tracee. The site owns the byte it displaced: enable() saves it
// and writes 0xCC (then reads back what it wrote), disable() puts it back. Both are idempotent.
#include <cstdint>
#include <string>

#include "breakpoint/address.hpp"
#include "breakpoint/tracee_memory.hpp"

namespace probecost {

inline constexpr std::uint8_t kInt3 = 0xCC;

class BreakpointSite {
 public:
  BreakpointSite(TraceeMemory& memory, RuntimeAddr address, std::string label = {})
      : memory_(&memory), address_(address), label_(std::move(label)) {}
  BreakpointSite(const BreakpointSite&) = delete;
  BreakpointSite& operator=(const BreakpointSite&) = delete;

  void enable();
  void disable();
  // The tracee is gone (exit, exec): its memory no longer holds our byte; forget it.
  void forget() { enabled_ = verified_ = false; }

  bool enabled() const { return enabled_; }
  RuntimeAddr address() const { return address_; }
  std::uint8_t saved_byte() const { return saved_; }
  const std::string& label() const { return label_; }

  // The empty handler's work: count. One counter per site; per-thread counts live in the tracer.
  std::uint64_t hits = 0;

 private:
  TraceeMemory* memory_;
  RuntimeAddr address_;
  std::string label_;
  std::uint8_t saved_ = 0;
  bool enabled_ = false;
  bool verified_ = false;  // read back once; later re-inserts on the hit path trust the write
};

}  // namespace probecost
