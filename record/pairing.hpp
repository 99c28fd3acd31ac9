#pragma once
// Pairs each thread's exits with their entries, one stack of open frames per thread.
//
// An exit closes the innermost open frame of its probe whose return-address slot (Event::sp) is
// the exit's; without sp, the innermost open frame of its probe. Frames above the one it closes
// were left without a return (an exception or a longjmp unwound past them) and are reported
// unmatched, as are frames still open when their thread exits or the recording ends: their end
// is unknown and never guessed. With sp, an entry into an open frame's slot also shows that
// frame (and all above it) left: a longjmp back into a loop that calls the same function again.
// A signal handler that calls a probed function pushes on top of the interrupted frame and pops
// before it resumes, so it pairs as a nested call, on the thread's stack or a sigaltstack.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "record/output.hpp"

namespace probecost::record {

class Pairing {
 public:
  // max_depth bounds a thread's stack (runaway recursion, or exits lost): past it the oldest
  // open frame is reported unmatched (Unmatched::evicted).
  explicit Pairing(Output& out, std::size_t max_depth = 1 << 16);

  void add(const Event& e);
  void thread_exited(std::int32_t pid, std::int32_t tid);
  // Every open frame becomes unmatched (Unmatched::open_at_end).
  void finish();

  std::size_t open_frames() const;

 private:
  using Stack = std::deque<Event>;
  static std::uint64_t key(std::int32_t pid, std::int32_t tid);
  void push(const Event& entry);
  void drop_reused(Stack& stack, std::uint64_t sp);
  void close(const Event& end);
  void drain(Stack& stack, Unmatched why);

  Output& out_;
  std::size_t max_depth_;
  std::unordered_map<std::uint64_t, Stack> stacks_;
};

}  // namespace probecost::record
