#pragma once
// One int3 breakpoint site in a tracee. The site owns the byte it displaced: enable() saves it
// and writes 0xCC (then reads back what it wrote), disable() puts it back. Both are idempotent.
#include <cstdint>
#include <functional>
#include <string>

#include "breakpoint/x86/tracee_memory.hpp"
#include "common/address.hpp"

namespace probecost {

inline constexpr std::uint8_t kInt3 = 0xCC;

// Told once per site, when its int3 is first written: where, and the byte it displaced (the
// tracer's guardian keeps the list, to put the bytes back should the tracer die).
using SiteWatcher = std::function<void(RuntimeAddr at, std::uint8_t original)>;

// Told once per site, before its int3 is first written (the record of every patch that
// restore goes by must exist before the patch does), and when the site is removed.
struct SiteRecorder {
  SiteWatcher before_write;
  std::function<void(RuntimeAddr at)> removed;
};

class BreakpointSite {
 public:
  BreakpointSite(TraceeMemory& memory, RuntimeAddr address, std::string label = {},
                 const SiteWatcher* watcher = nullptr, const SiteRecorder* recorder = nullptr)
      : memory_(&memory),
        address_(address),
        label_(std::move(label)),
        watcher_(watcher),
        recorder_(recorder) {}
  BreakpointSite(const BreakpointSite&) = delete;
  BreakpointSite& operator=(const BreakpointSite&) = delete;

  void enable();
  void disable();
  // The tracee is gone (exit, exec): its memory no longer holds our byte; forget it.
  void forget() { enabled_ = verified_ = false; }
  // An int3 already at the address (left by a tracer that died) whose original byte is known
  // (from the ELF file): the site owns it from now on, and disable() puts `original` back.
  void adopt(std::uint8_t original);

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
  const SiteWatcher* watcher_;
  const SiteRecorder* recorder_;
  std::uint8_t saved_ = 0;
  bool enabled_ = false;
  bool verified_ = false;  // read back once; later re-inserts on the hit path trust the write
};

}  // namespace probecost
