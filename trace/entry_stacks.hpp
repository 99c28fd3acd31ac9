#pragma once
// `probecost record --stacks`: each entry's stack, from its snapshot to the entry's event.
//
// The trampoline of a jump-patched entry writes a stack snapshot (into the snapshot buffer)
// and then the entry record (into the call buffer), both in the thread that calls. StackFeed's
// thread unwinds each snapshot while the process runs and hands it to add(): per snapshot 32
// bytes {tsc, thread pointer, sp | probe id << 48, stack}, spooled per CPU as CallSpool's
// chunks (the ring's order, which is the TSC's), and each distinct stack kept once (its
// addresses). Once the feed has stopped, the distinct stacks are named in the ptrace thread, as
// `trace` names its stacks (set_names). At the replay, a Matcher walks the snapshots in TSC
// order beside the call records and gives each entry record its thread's last snapshot before
// it with the same stack slot and probe id, not yet taken; an exit of that slot and probe
// forgets a snapshot no entry took (its entry record was lost): no entry gets another's stack.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "breakpoint/in_tracee/stack_record.hpp"
#include "record/events.hpp"
#include "trace/call_drain.hpp"
#include "tracer/symbols/stack_unwind.hpp"

namespace probecost::trace_run {

class EntryStacks {
 public:
  // An int3 entry's snapshot (the ptrace thread's copy): tp = tid | this, which no thread
  // pointer has (user addresses end at 2^47); its probe id the recording's.
  static constexpr std::uint64_t kStoppedTp = 1ull << 63;
  // Its spool in `dir` (Error when none can be made there).
  EntryStacks(const std::string& dir, std::uint32_t max_ids);

  // StackFeed's thread: one snapshot, and its stack (empty when not copied or not unwound).
  void add(std::uint32_t cpu, const jump::StackSnapshot& s, const SnapshotUnwinder::Stack& st);
  // The feed has stopped: what add() holds goes to the spool.
  void flush();

  struct Distinct {
    std::vector<std::uint64_t> ips;  // the site first, then return addresses
    bool truncated = false;          // the copy ended before the outermost frame
    bool operator<(const Distinct& o) const {
      return std::tie(ips, truncated) < std::tie(o.ips, o.truncated);
    }
  };
  const std::vector<Distinct>& distinct() const { return distinct_; }
  // Each distinct stack's frames, outermost first (the probed function last).
  void set_names(std::vector<std::vector<std::string>> names) { names_ = std::move(names); }
  const std::vector<std::vector<std::string>>& names() const { return names_; }
  const CallSpool& spool() const { return spool_; }

  // Entries by what they got, at the replay.
  struct Tally {
    std::uint64_t with_stack = 0, truncated = 0;
    std::map<record::StackMissing, std::uint64_t> without;
  };

  // The replay's side: call records in TSC order in, each entry's stack out.
  class Matcher {
   public:
    // `first_id`: the recording's id of distinct stack 0 (Output::stack).
    Matcher(const EntryStacks& stacks, std::uint32_t first_id);
    ~Matcher();
    Matcher(const Matcher&) = delete;
    Matcher& operator=(const Matcher&) = delete;
    // Sets e.stack or e.no_stack for an entry record; an exit forgets its frame's snapshot.
    void on_record(const jump::CallRecord& r, record::Event& e);
    // The same for an int3 entry (its snapshot: the thread's, at the event's own TSC).
    void on_stopped_entry(record::Event& e);
    const Tally& tally() const { return tally_; }

   private:
    struct Stream;
    void advance(std::uint64_t tsc);
    void take(std::pair<std::uint64_t, std::uint64_t> key, record::Event& e);
    struct KeyHash {
      std::size_t operator()(const std::pair<std::uint64_t, std::uint64_t>& k) const {
        return std::hash<std::uint64_t>()(k.first * 0x9e3779b97f4a7c15ull ^ k.second);
      }
    };
    const EntryStacks& stacks_;
    std::uint32_t first_id_;
    const std::uint8_t* map_ = nullptr;
    std::uint64_t size_ = 0;
    std::vector<Stream> cpus_;
    // Taken by no entry yet: by {thread pointer, sp | id << 48}, {stack index + 1 or 0, why}.
    std::unordered_map<std::pair<std::uint64_t, std::uint64_t>, std::pair<std::uint32_t, int>,
                       KeyHash>
        pending_;
    Tally tally_;
  };

 private:
  struct Ref;  // one snapshot as the spool keeps it
  std::uint32_t intern(std::vector<std::uint64_t> ips, bool truncated);
  CallSpool spool_;
  std::vector<std::vector<std::uint8_t>> batches_;  // by CPU: refs not spooled yet
  std::map<Distinct, std::uint32_t> index_;
  std::vector<Distinct> distinct_;
  std::vector<std::vector<std::string>> names_;
};

}  // namespace probecost::trace_run
