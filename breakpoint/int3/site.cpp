#include "breakpoint/int3/site.hpp"

#include "common/error.hpp"

namespace probecost {

void BreakpointSite::enable() {
  if (enabled_) return;
  if (verified_) {  // re-insert on the hit path: the saved byte is still right
    memory_->write_byte(address_, kInt3);
    enabled_ = true;
    return;
  }
  saved_ = memory_->read_byte(address_);
  if (saved_ == kInt3) {
    // Someone else's int3 (the program's own, or a debugger's): we could never tell its traps
    // from ours, and restoring would "restore" 0xCC.
    throw SiteOccupied("cannot place a breakpoint at " + address_.hex() +
                       ": it already holds int3");
  }
  if (recorder_ && recorder_->before_write) recorder_->before_write(address_, saved_);
  memory_->write_byte(address_, kInt3);
  // Read back the first time (as LLDB does): a write that silently went nowhere would count zero
  // hits. A step-over re-inserts on every hit; that path trusts the write it already checked.
  if (memory_->read_byte(address_) != kInt3) {
    throw Error("breakpoint at " + address_.hex() + " did not stick after writing it");
  }
  verified_ = true;
  enabled_ = true;
  if (watcher_ && *watcher_) (*watcher_)(address_, saved_);
}

void BreakpointSite::adopt(std::uint8_t original) {
  saved_ = original;
  enabled_ = verified_ = true;
}

void BreakpointSite::disable() {
  if (!enabled_) return;
  memory_->write_byte(address_, saved_);
  enabled_ = false;
}

}  // namespace probecost
