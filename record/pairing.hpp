#pragma once
// Pairs each thread's exits with their entries: per thread, one list of open frames per stack
// the thread runs on (its own, a sigaltstack, each ucontext coroutine's).
//
// With sp (Event::sp, the frame's return-address slot), an exit closes the open frame of its
// probe at exactly its slot, on whichever of the thread's stacks it is: a coroutine that
// yields mid-function (swapcontext to another stack) and returns later pairs with its own
// entry, whatever ran on the other stacks meanwhile. Frames deeper than it on its own stack
// (lower addresses, pushed after it) were left without a return (an exception or a longjmp
// unwound past them) and are reported unmatched; frames of the other stacks stay open. Two
// live frames cannot share a slot, so an entry into an open frame's slot also shows that frame
// (and the deeper ones pushed after it) left: a longjmp back into a loop that calls the same
// function again. Without sp (0: a source that does not know it), an exit closes the innermost
// open frame of its probe on the thread's current stack, as a plain per-thread stack would.
//
// Which stack: the stacks are told apart by address alone (the events carry no stack bounds).
// An entry joins the stack it last ran on, or another of its stacks, when it lies within
// kSameStackBytes of that stack's frames; otherwise it starts a stack of its own. A callee
// whose caller's frame is larger than that (a big local array) is taken for another stack:
// nothing is mispaired (exits go by slot), only its frames, when an exception unwinds past
// them, are reported when their slot is used again or at the end instead of at once. A switch
// to another stack looks through the thread's stacks in turn: O(stacks) per switch, which a
// thread running thousands of coroutines pays at each one.
//
// Frames still open when their thread exits or the recording ends are unmatched: their end is
// unknown and never guessed. A signal handler that calls a probed function pushes on top of the
// interrupted frame and pops before it resumes, so it pairs as a nested call, on the thread's
// stack or a sigaltstack.
//
// Memory: an open frame is 24 bytes + 8 per argument (RunInfo::arg_count). At most max_depth
// open frames per thread (2^20 by default: deeper than an 8 MiB stack can hold, at 16 bytes or
// more per frame) and kMaxFrames over all threads; past either, the oldest open frame of the
// stack being pushed is reported unmatched (Unmatched::evicted).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "record/output.hpp"

namespace probecost::record {

class Pairing {
 public:
  static constexpr std::size_t kMaxDepth = std::size_t{1} << 20;
  static constexpr std::size_t kMaxFrames = std::size_t{1} << 21;
  static constexpr std::uint64_t kSameStackBytes = 32 << 10;

  // arg_count: how many of an entry's args are kept (and handed back in call()/unmatched()).
  explicit Pairing(Output& out, std::size_t max_depth = kMaxDepth, int arg_count = kMaxArgs,
                   std::size_t max_frames = kMaxFrames);

  void add(const Event& e);
  void thread_exited(std::int32_t pid, std::int32_t tid);
  // Every open frame becomes unmatched (Unmatched::open_at_end).
  void finish();

  std::size_t open_frames() const { return frames_; }

 private:
  struct Frame {
    std::uint64_t tsc = 0, sp = 0;
    std::uint32_t probe = 0;
    // Event::stack, or with no stack, kNoStack + Event::no_stack (a frame stays 24 bytes).
    std::uint32_t stack = 0;
  };
  static constexpr std::uint32_t kNoStack = 0xffffff00;
  // One stack's open frames, oldest first; lo/hi: the lowest and highest nonzero sp pushed
  // since it was last empty.
  struct Stack {
    std::deque<Frame> frames;
    std::deque<std::uint64_t> args;  // arg_count per frame
    std::uint64_t lo = UINT64_MAX, hi = 0;
    bool near(std::uint64_t sp) const;
  };
  struct Thread {
    std::int32_t pid = 0, tid = 0;
    std::vector<Stack> stacks;
    std::size_t current = 0;  // the stack it last ran on
    std::size_t frames = 0;
  };
  static std::uint64_t key(std::int32_t pid, std::int32_t tid);
  Event entry_of(const Thread& t, const Stack& s, std::size_t i) const;
  Stack& stack_for(Thread& t, std::uint64_t sp);
  void push(const Event& entry);
  void drop_reused(Thread& t, Stack& s, std::uint64_t sp);
  void evict(Thread& t, Stack& s);
  bool close_in(Thread& t, std::size_t stack, const Event& end);
  void close(const Event& end);
  void remove(Thread& t, Stack& s, std::size_t i);
  void report(Thread& t, Stack& s, std::size_t i, Unmatched why);
  void drain(Thread& t, Unmatched why);

  Output& out_;
  std::size_t max_depth_;
  std::size_t args_;
  std::size_t max_frames_;
  std::size_t frames_ = 0;
  std::unordered_map<std::uint64_t, Thread> threads_;
};

}  // namespace probecost::record
