#pragma once
// `probecost record` inside a trace run: one process image's call records on their way to the
// recording. The records come from two places: the call buffer the trampolines write (drained
// while the process runs) and the int3 hits of entries and exits no jump could serve (taken in
// the tracer, the thread stopped). Each record names its thread by its thread pointer (%fs:0);
// the feed knows each thread's from its fs_base, read when the thread appeared. While the
// process runs, the buffer's drain (call_drain.hpp, a thread of its own) copies the records to a
// spool as they are, and the int3 events wait in a spool of their own (event_spool.hpp, at most
// one batch in memory); replay() then hands the recording
// every event in time order (each CPU's records are, and the CPUs' are merged with the int3
// events), so each thread's are in order.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <unordered_map>
#include <vector>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "breakpoint/x86/decoder.hpp"
#include "breakpoint/x86/tracee_memory.hpp"
#include "record/recorder.hpp"
#include "trace/call_drain.hpp"
#include "trace/entry_stacks.hpp"
#include "trace/event_spool.hpp"
#include "tracer/core/process.hpp"
#include "tracer/symbols/usdt_args.hpp"

namespace probecost::trace_run {

class CallFeed {
 public:
  // `probe_of_id`: a call probe id's probe in the recording. The int3 events wait in
  // `spool_dir`.
  CallFeed(record::Recorder& rec, pid_t pid, std::vector<std::uint32_t> probe_of_id, int args,
           const std::string& spool_dir)
      : rec_(rec),
        pid_(pid),
        probe_of_id_(std::move(probe_of_id)),
        args_(args),
        int3_events_(spool_dir) {}

  // A thread whose thread pointer is `fs_base` from now on (a thread pointer can be a gone
  // thread's: glibc reuses the stacks, and the TCB with them; a thread back from vfork() has
  // its own again, which its child ran with meanwhile). The threads' names are taken then.
  void thread_appeared(pid_t tid, std::uint64_t fs_base);
  // The threads' names (comm) as they are now, each change kept with its time: at each new
  // thread, at each tick of the event loop, at the end; and a thread's at its exit.
  void sample_names();
  void thread_exiting(pid_t tid);
  // Every thread of the process, stopped (the probes going in).
  void threads_of(TracedProcess& proc);

  // When an exit's int3, which stops the thread on every pass, is an exit.
  struct ExitCheck {
    // A conditional tail call (jcc): when its condition (the low nibble of 0x7X) holds.
    std::optional<std::uint8_t> taken_if;
    // A jump through a register or memory: when its target (jump_target()) is not `stays`'s.
    std::optional<Instruction> jump;
    std::function<bool(RuntimeAddr)> stays;
  };
  // An int3 that serves call probe `id`'s entry (or exit): its hits are events. One int3 may
  // serve both, at a function whose first instruction leaves it (`ret` alone, a 2-byte tail
  // jmp): each hit is then an entry, and an exit when it leaves.
  void int3_site(RuntimeAddr at, std::uint32_t id, bool exit, ExitCheck check = {}) {
    Int3Role& role = int3_[at.value()];
    role.id = id;
    (exit ? role.exit : role.entry) = true;
    if (exit) role.check = std::move(check);
  }
  // A USDT marker's int3: each hit is a marker event of call probe `id`, its arguments read
  // from the stopped thread as `args` says, each `text` one's string copied (up to
  // kMarkerStringBytes, "..." marking a longer one; the pointer as "0x..." when it points at no
  // text).
  static constexpr std::size_t kMarkerStringBytes = 256;
  void marker_site(RuntimeAddr at, std::uint32_t id, std::vector<UsdtArg> args,
                   std::vector<bool> text) {
    markers_[at.value()] = {id, std::move(args), std::move(text)};
  }
  // A hit of the int3 at `at` by `tid`, its registers as the function's entry or exit sees
  // them (`memory`: where an indirect jump's pointer is read). False when the site is not one
  // of ours.
  bool on_int3(pid_t tid, RuntimeAddr at, const user_regs_struct& regs, TraceeMemory& memory);

  // The call buffer's drain starts (a thread), its spool in `spool_dir`.
  void start_drain(jump::CallReader& reader, const std::string& spool_dir,
                   const CallDrain::Options& options);
  // No writer is left: the drain's last copy, and the lost records counted. Before the
  // buffer goes. Idempotent.
  void finish_drain();
  // `record --stacks`: the entries' stacks (StackFeed fills it while the process runs).
  void take_stacks(std::unique_ptr<EntryStacks> stacks) { stacks_ = std::move(stacks); }
  // And an int3 entry's: the stopped thread's registers and `bytes` of its stack copied here,
  // handed to `unwind` (StackFeed::add_stopped) with tp = tid | kStoppedTp.
  using StoppedStack =
      std::function<void(const jump::StackSnapshot&, std::vector<std::uint8_t> bytes)>;
  void stopped_stacks(StoppedStack unwind, std::uint32_t bytes) {
    stopped_ = std::move(unwind);
    stopped_bytes_ = bytes;
    stopped_asked_ = true;
  }
  // The feed is stopping: no more copies (what was copied is matched at the replay).
  void no_more_stopped_stacks() { stopped_ = nullptr; }
  EntryStacks* stacks() { return stacks_.get(); }
  // Every event to the recording, in time order (after finish_drain), each entry with its
  // stack (named to the recording first, from `next_stack_id` on, which it moves past them).
  // `progress`: a line each second there when it takes longer than one.
  void replay(std::ostream* progress, std::uint32_t& next_stack_id);
  // What the entries got, once replayed (nullptr without --stacks).
  const EntryStacks::Tally* stack_tally() const { return tally_ ? &*tally_ : nullptr; }
  // The calls' records the replay found in the spool (its sync records not counted).
  std::uint64_t records_decoded() const { return decoded_; }
  const CallDrain* drain() const { return drain_.get(); }
  const CallSpool* spool() const { return spool_.get(); }
  const EventSpool& int3_spool() const { return int3_events_; }

 private:
  struct Int3Role {
    std::uint32_t id = 0;
    bool entry = false, exit = false;
    ExitCheck check;
  };
  void add_int3_event(bool exit, std::uint32_t probe, pid_t tid, const user_regs_struct& regs,
                      RuntimeAddr at);
  struct MarkerSite {
    std::uint32_t id = 0;
    std::vector<UsdtArg> args;
    std::vector<bool> text;
  };
  void add_marker_event(const MarkerSite& site, pid_t tid, const user_regs_struct& regs,
                        TraceeMemory& memory);
  bool leaves(const ExitCheck& check, const user_regs_struct& regs, TraceeMemory& memory) const;
  struct Since {
    std::uint64_t tsc = 0;
    pid_t tid = 0;
  };
  record::Event event_of(const jump::CallRecord& r);
  // The thread whose thread pointer was `tp` at `tsc`; 0 for a pointer of no thread we saw
  // appear.
  pid_t tid_of(std::uint64_t tp, std::uint64_t tsc);
  void add(const record::Event& e);
  struct Stream;
  std::vector<Stream> streams(const std::uint8_t* spool) const;

  record::Recorder& rec_;
  pid_t pid_;
  std::vector<std::uint32_t> probe_of_id_;
  int args_;
  std::unordered_map<std::uint64_t, Int3Role> int3_;
  std::unordered_map<std::uint64_t, MarkerSite> markers_;
  std::unordered_map<std::uint64_t, std::vector<Since>> threads_;  // by thread pointer
  EventSpool int3_events_;                                         // not handed on yet
  std::unique_ptr<CallSpool> spool_;
  std::unique_ptr<CallDrain> drain_;
  jump::CallBufferLayout layout_;
  jump::CallReader* reader_ = nullptr;  // until finish_drain()
  std::uint64_t decoded_ = 0;
  struct LostRecords {
    std::uint64_t entries = 0, exits = 0;
  };
  std::vector<LostRecords> lost_;  // by id: dropped by the writers, or not kept
  struct Named {
    std::uint64_t tsc = 0;
    pid_t tid = 0;
    std::string name;
  };
  void sample_name(pid_t tid, std::uint64_t tsc);
  void names_until(std::uint64_t tsc);
  std::vector<Named> names_;                // each thread's names as they changed, in time order
  std::map<pid_t, std::string> last_name_;  // each thread's last name seen
  std::size_t names_given_ = 0;             // names_ handed to the recording
  std::unique_ptr<EntryStacks> stacks_;
  std::optional<EntryStacks::Tally> tally_;
  StoppedStack stopped_;
  std::uint32_t stopped_bytes_ = 0;
  bool stopped_asked_ = false;
};

}  // namespace probecost::trace_run
