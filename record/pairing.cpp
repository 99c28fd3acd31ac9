#include "record/pairing.hpp"

#include <algorithm>
#include <vector>

namespace probecost::record {

namespace {

bool closes(const Event& frame, const Event& end) {
  if (frame.probe != end.probe) return false;
  return frame.sp == 0 || end.sp == 0 || frame.sp == end.sp;
}

}  // namespace

Pairing::Pairing(Output& out, std::size_t max_depth)
    : out_(out), max_depth_(max_depth == 0 ? 1 : max_depth) {}

std::uint64_t Pairing::key(std::int32_t pid, std::int32_t tid) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)) << 32 |
         static_cast<std::uint32_t>(tid);
}

void Pairing::add(const Event& e) {
  if (e.kind == EventKind::entry)
    push(e);
  else
    close(e);
}

// A call whose return-address slot is an open frame's: that frame is over (two live frames
// cannot share a slot), and so is everything pushed after it. The scan goes down from the top
// while the frames are deeper than the new one (lower addresses) and stops at the first frame
// above it, normally the top one: O(1). A handler on a sigaltstack above the interrupted frames
// stops the scan early and is left alone.
void Pairing::drop_reused(Stack& stack, std::uint64_t sp) {
  if (sp == 0) return;
  auto frame = stack.rbegin();
  while (frame != stack.rend() && frame->sp != 0 && frame->sp < sp) ++frame;
  if (frame == stack.rend() || frame->sp != sp) return;
  std::size_t keep = static_cast<std::size_t>(stack.rend() - frame) - 1;
  while (stack.size() > keep) {
    out_.unmatched(stack.back(), Unmatched::skipped);
    stack.pop_back();
  }
}

void Pairing::push(const Event& entry) {
  Stack& stack = stacks_[key(entry.pid, entry.tid)];
  drop_reused(stack, entry.sp);
  if (stack.size() >= max_depth_) {
    out_.unmatched(stack.front(), Unmatched::evicted);
    stack.pop_front();
  }
  stack.push_back(entry);
}

void Pairing::close(const Event& end) {
  auto it = stacks_.find(key(end.pid, end.tid));
  if (it == stacks_.end()) return out_.orphan(end);
  Stack& stack = it->second;
  auto frame = stack.rbegin();
  while (frame != stack.rend() && !closes(*frame, end)) ++frame;
  if (frame == stack.rend()) return out_.orphan(end);
  // Everything above the frame that returned was left without returning.
  std::size_t keep = static_cast<std::size_t>(stack.rend() - frame) - 1;
  while (stack.size() > keep + 1) {
    out_.unmatched(stack.back(), Unmatched::skipped);
    stack.pop_back();
  }
  out_.call(stack.back(), end);
  stack.pop_back();
  if (stack.empty()) stacks_.erase(it);
}

void Pairing::drain(Stack& stack, Unmatched why) {
  // Innermost first, as the frames would have ended.
  for (auto frame = stack.rbegin(); frame != stack.rend(); ++frame) out_.unmatched(*frame, why);
  stack.clear();
}

void Pairing::thread_exited(std::int32_t pid, std::int32_t tid) {
  auto it = stacks_.find(key(pid, tid));
  if (it == stacks_.end()) return;
  drain(it->second, Unmatched::thread_gone);
  stacks_.erase(it);
}

void Pairing::finish() {
  // By process and thread, so that the same run writes the same file.
  std::vector<std::uint64_t> keys;
  for (const auto& [k, stack] : stacks_) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  for (std::uint64_t k : keys) drain(stacks_[k], Unmatched::open_at_end);
  stacks_.clear();
}

std::size_t Pairing::open_frames() const {
  std::size_t n = 0;
  for (const auto& [k, stack] : stacks_) n += stack.size();
  return n;
}

}  // namespace probecost::record
