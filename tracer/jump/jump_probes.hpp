#pragma once
// Jump-patched probes in a traced process: the tracer side of breakpoint/jump_*.
//
// A probe's first instructions are replaced by a 5-byte jmp to a trampoline that counts the hit
// (and with events writes the static marker's record) inside the tracee, runs the displaced
// instructions and jumps back: no trap, no stop, no system call per hit. The trampolines, hit
// counters and event rings live in a memfd that the tracee maps within +-2 GiB of the sites and
// the tracer maps too, so it reads counts and drains records while the process runs.
//
// Installing happens with every thread stopped, in the order of the kernel's text_poke_bp.
// Removing is TracedProcess's job (detach() and the like), because every way out must do it.
// If probecost dies, the jumps stay and keep working: the process runs on correctly, and
// `probecost restore -p PID` finds the area by its header and puts the bytes back.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "breakpoint/in_tracee/event_ring.hpp"
#include "breakpoint/in_tracee/jump_area.hpp"
#include "breakpoint/in_tracee/stack_record.hpp"
#include "breakpoint/jump/exit_plan.hpp"
#include "tracer/core/process.hpp"
#include "tracer/core/stacks.hpp"
#include "tracer/jump/rseq.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

class ModuleCode;

// Call probes: entry and exit records of every call in the process's call buffer.
inline constexpr std::uint64_t kCallBufferTotal = 256 << 20;
struct CallOptions {
  int args = 0;  // arguments per entry record, 0 to 6
  // Per CPU, a power of two; 0: 16 MiB, less where the CPUs are many (kCallBufferTotal in all,
  // 4 MiB at least).
  std::uint64_t buffer_bytes = 0;
  std::uint32_t max_ids = 1024;      // probe ids 0 .. max_ids - 1
  jump::CallReader::Options reader;  // its flush interval and commit slack (TSC ticks)
  // Every page of the call buffer written once by the process at attach (jump_probes_map.cpp), so
  // that no record is the first user-mode write to its page; false: populated only.
  bool warm = true;
};

struct JumpOptions {
  bool events = false;             // write a record per hit
  std::uint32_t event_sites = 16;  // sites per area that may have events (a ring each)
  std::uint64_t ring_capacity = 1 << 16;
  std::uint32_t max_sites = 64;  // per area
  // Count per CPU in a restartable sequence (no locked instruction) where glibc registered
  // rseq in the process; elsewhere, and with events, lock inc.
  bool per_cpu_counts = true;
  CallOptions calls;  // for add_calls()
  // Jump probes (and call probes' entries) that also take a stack snapshot of up to this many
  // bytes at each hit (breakpoint/in_tracee/stack_record.hpp) into the snapshot buffer (a call
  // buffer of its own, CallOptions' size); 0: none.
  std::uint32_t stack_bytes = 0;
};

// Whether `to` is still the function `fn` (a jump there leaves no frame): inside its bytes but
// for its entry, or in its own cold part (GCC's "fn.cold", the unlikely paths moved out).
bool stays_in_function(const Symbol& fn, RuntimeAddr to, const ProcessSymbols& symbols);

// A function to record every call of (add_calls).
struct CallRequest {
  RuntimeAddr function;  // its entry: the start of its symbol
  std::uint32_t id = 0;  // in its records: below CallOptions::max_ids
  std::string label;
};

// How a function's call probe went in: the patches that write its records, and what an int3
// must serve instead (the caller puts those in).
struct CallInstall {
  std::string undecodable;     // set: its code does not decode, nothing is planned or put in
  bool entry_jump = false;     // its entry writes the entry record (else: an int3 at the entry)
  std::string why_entry;       // why not
  bool whole = false;          // patched whole: the entry and its first exit in one patch
  std::size_t exit_jumps = 0;  // exits under patches of their own
  // Its exits (patched, whole or int3), and those of them that are tail calls (a jmp or jcc to
  // another function): a call that leaves by one is timed to the jump, without the callee.
  std::size_t exits = 0, tail_exits = 0;
  std::vector<ExitSite> int3_exits;       // exits an int3 serves, with the reason
  std::vector<Instruction> unseen_exits;  // indirect jumps: exits nobody can tell apart
};

// The jump areas a process maps (ours, or left by a probecost that died), read from their
// headers. An area that cannot be read is skipped, with the reason in `notes`.
std::vector<jump::ParsedArea> read_jump_areas(TracedProcess& process,
                                              std::vector<std::string>& notes);

struct JumpRequest {
  RuntimeAddr site;
  std::uint32_t id = 0;  // in its event records
  std::string label;
};

class JumpProbes {
 public:
  JumpProbes(TracedProcess& process, const JumpOptions& options);
  ~JumpProbes();
  JumpProbes(const JumpProbes&) = delete;
  JumpProbes& operator=(const JumpProbes&) = delete;

  // Patches a jump at each request's site, every thread of the process stopped. All are
  // planned together, from the code as the module's file holds it (never from bytes probecost
  // wrote), and no jump covers another probe: neither another request's site nor one of
  // `others`, the process's probes that will be int3 bytes (such a site would be inside the
  // jmp; both are served by int3 instead, which counts each exactly). For each request, the
  // probe's index, or nothing with the reason in why[i]: the plan refused the site, another
  // probe, a branch or a landing pad is inside the range, a thread is (or a signal handler
  // will return) inside it, no area could be mapped near it. With `all_or_nothing`, one
  // refusal refuses every request (those not refused themselves get no reason), and nothing
  // is left in the process.
  std::vector<std::optional<std::size_t>> add_all(const std::vector<JumpRequest>& requests,
                                                  const std::vector<RuntimeAddr>& others,
                                                  const ProcessSymbols& symbols,
                                                  std::vector<std::string>& why,
                                                  bool all_or_nothing = false);
  // Call probes: each function's entry and exits, planned together with its whole code
  // (breakpoint/jump/exit_plan.hpp) and checked as jumps are (no other probe, branch, landing pad
  // or thread inside a patch), writing entry and exit records into the process's call buffer
  // (mapped at the first call: CallOptions). `others`: the process's int3 probes elsewhere.
  // With no rseq registration in the process (calls_refused()), every entry and exit is an
  // int3. Each function must be a whole sized symbol at `function`.
  std::vector<CallInstall> add_calls(const std::vector<CallRequest>& requests,
                                     const std::vector<RuntimeAddr>& others,
                                     const ProcessSymbols& symbols);
  // The call buffer's reader: nullptr until add_calls() mapped the buffer.
  jump::CallReader* call_reader() { return call_reader_.get(); }
  // The stack snapshots' reader (JumpOptions::stack_bytes): nullptr until a probe that takes
  // them mapped their buffer.
  jump::CallReader* stack_reader() { return stack_reader_.get(); }
  // Why no call record can be written in this process (no usable rseq registration, the buffer
  // could not be mapped); empty otherwise.
  const std::string& calls_refused() const { return calls_refused_; }
  // Why no stack snapshot can be taken (JumpOptions::stack_bytes); empty otherwise.
  const std::string& stacks_refused() const { return stacks_refused_; }
  // Why the call buffer was only populated, not written through by the process (a note).
  const std::string& call_buffer_cold() const { return warm_why_; }
  // Stack snapshots (JumpOptions::stack_bytes): each stopped thread's stack bounds into the
  // buffer's thread table (add_all does it), a new thread's at its clone (its thread pointer and
  // the stack pointer it starts with), a gone thread's out. Threads whose stack could not be
  // bounded or entered (their hits get no copy).
  void enter_stacks_of_threads();
  void enter_new_thread(pid_t tid, std::uint64_t tp, std::uint64_t sp);
  // Thread `tid` is exiting (its PTRACE_EVENT_EXIT: no code of its own runs again): its entry
  // freed for a thread to come (glibc reuses a freed stack, and its TCB, for a new thread).
  void forget_thread(pid_t tid);
  std::uint64_t unbounded_threads() const { return unbounded_threads_; }
  // One site alone (add_all of one).
  std::optional<std::size_t> add(RuntimeAddr site, const ProcessSymbols& symbols, std::uint32_t id,
                                 std::string label, std::string& why);
  // Why the process refuses the executable mapping of a jump area (a seccomp filter, as
  // systemd's MemoryDenyWriteExecute= installs): every jump is refused with it from then on.
  // Empty while none was refused.
  const std::string& mapping_refused() const { return mapping_refused_; }

  std::size_t size() const { return probes_.size(); }
  RuntimeAddr site(std::size_t probe) const { return probes_.at(probe).site; }
  std::size_t patched_length(std::size_t probe) const { return probes_.at(probe).length; }
  // Every hit so far (read while the process runs).
  std::uint64_t hits(std::size_t probe) const;
  // Records written since the last drain of this probe; `final` once no thread can write any
  // more (stopped or gone). Totals are kept in records_read()/records_lost().
  jump::Drained drain(std::size_t probe, bool final = false);
  std::uint64_t records_read(std::size_t probe) const { return probes_.at(probe).read; }
  std::uint64_t records_lost(std::size_t probe) const { return probes_.at(probe).lost; }
  bool events() const { return options_.events; }

 private:
  struct Area {
    std::uint8_t* view = nullptr;  // the tracer's mapping
    std::size_t size = 0;
    RuntimeAddr tracee_at;
    std::unique_ptr<jump::AreaWriter> writer;
    std::size_t installed = 0;  // sites patched to jump here
  };
  struct CallBuffer {
    std::uint8_t* view = nullptr;  // ours
    std::size_t size = 0;
    RuntimeAddr tracee_at;
  };
  struct Probe {
    RuntimeAddr site;
    std::size_t length = 0;
    std::size_t area = 0, index = 0;
    std::uint64_t cursor = 0, read = 0, lost = 0;
  };
  // One request on its way in.
  struct Candidate {
    std::size_t request = 0;  // its slot in the caller's `why`
    std::optional<JumpPlan> plan;
    std::optional<jump::PlacedSite> placed;
    std::size_t area = 0;
  };
  using Probes = std::vector<std::pair<RuntimeAddr, std::string>>;
  // Where a stopped thread is, or will be when a signal handler it is in returns.
  struct ThreadPc {
    pid_t tid = 0;
    RuntimeAddr pc;
    bool interrupted = false;  // saved in a signal frame on the thread's stack
    // In code no file holds (a scratch page or trampoline a previous probecost left, JIT
    // code): where its direct branches lead out of it (breakpoint/x86/code_walk.hpp).
    std::vector<RuntimeAddr> exits;
  };

  // jump_probes_checks.cpp: the plan, and every reason a planned range may not be patched.
  std::optional<JumpPlan> plan(RuntimeAddr site, const ProcessSymbols& symbols,
                               const std::vector<Mapping>& maps, std::string& why);
  std::vector<std::uint8_t> original_code(const Symbol& function, const std::vector<Mapping>& maps);
  void undo_our_bytes(RuntimeAddr at, std::span<std::uint8_t> bytes);
  std::string why_module(const JumpPlan& plan, const ProcessSymbols& symbols,
                         const std::vector<Mapping>& maps);
  static std::string why_other_probe(
      const JumpPlan& plan, const std::vector<std::pair<RuntimeAddr, std::string>>& probes);
  std::string why_installed(const JumpPlan& plan);
  // ModuleCode::of for mapping `m`, kept by the mapping's identity for one planning pass
  // (candidates) while no task is resumed: a plan and its checks read the same module, and
  // each of() reads /proc/PID/exe and opens /proc/PID/map_files.
  std::shared_ptr<const ModuleCode> module_of(const Mapping& m, std::string& why);
  std::vector<ThreadPc> thread_pcs();
  std::vector<RuntimeAddr> exits_of(RuntimeAddr pc, const std::vector<Mapping>& maps);
  static std::string why_thread(const JumpPlan& plan, const std::vector<ThreadPc>& pcs);
  // Lets the threads run a moment and stops them again (a thread caught inside a patch range
  // is usually just passing through).
  void let_threads_move();
  // Refuses the candidates with a thread inside their range, after retries.
  void check_threads(std::vector<Candidate>& cands, std::vector<std::string>& why);

  // jump_probes.cpp: planning, placing and installing.
  std::vector<Candidate> candidates(const std::vector<JumpRequest>& requests,
                                    const std::vector<RuntimeAddr>& others,
                                    const ProcessSymbols& symbols, std::vector<std::string>& why,
                                    std::map<std::uint64_t, std::size_t>& first_at);
  jump::SiteOptions site_options(std::uint32_t id) const;
  // Why the planned range may not be patched, beyond the threads: another probe, a branch or
  // landing pad inside, our own bytes there. Empty if it may.
  std::string why_not(const JumpPlan& plan, const Probes& probes, const ProcessSymbols& symbols,
                      const std::vector<Mapping>& maps);
  bool place(Candidate& c, const jump::SiteOptions& opts, std::string& why);
  void install(const Candidate& c, const std::string& label);
  void forget_empty_areas(std::size_t from);
  // The process's rseq registration, read once (from a stopped thread); sets the counting's
  // layout to per CPU where it may, before any area is mapped.
  const std::optional<RseqRegistration>& rseq();

  // jump_probes_calls.cpp: call probes. One slot per planned patch.
  struct Slots {
    std::vector<std::size_t> owner;  // the request it is of
    std::vector<JumpPlan> plans;
    std::vector<std::string> why;  // why it did not go in
  };
  std::vector<Candidate> call_candidates(const std::vector<CallRequest>& requests,
                                         const std::vector<RuntimeAddr>& others,
                                         const ProcessSymbols& symbols,
                                         std::vector<CallInstall>& out, Slots& slots);
  jump::SiteOptions call_site_options(std::uint32_t id) const;
  CallRecordTarget buffer_target(const CallBuffer& buffer, const jump::CallBufferLayout& layout,
                                 std::uint32_t id) const;
  // A buffer of call records (stack_bytes 0) or of stack snapshots, mapped once; false with
  // calls_refused_ (or stacks_refused_) set when it cannot be.
  bool ensure_buffer(std::uint32_t stack_bytes, CallBuffer& buffer, jump::CallBufferLayout& layout,
                     std::unique_ptr<jump::CallReader>& reader, std::string& refused);
  bool ensure_call_buffer();
  bool ensure_stack_buffer();
  void release_kept_rings(const CallBuffer& buffer, const jump::CallBufferLayout& layout);
  // A planned patch that did not go in: its entry or exit becomes an int3.
  static void to_int3(const JumpPlan& plan, const std::string& why, CallInstall& out);

  // jump_probes_stacks.cpp: the thread table of stack snapshots. `top`: where the thread's own
  // stack ends at the latest, when known (0 or outside the mapping: the mapping's end).
  std::optional<std::pair<std::uint64_t, std::uint64_t>> stack_bounds(
      pid_t tid, std::uint64_t sp, std::uint64_t top, const std::vector<Mapping>& maps) const;
  jump::ThreadTable thread_table();
  void enter_stack(pid_t tid, std::uint64_t tp, std::uint64_t sp, std::uint64_t top,
                   const std::vector<Mapping>& maps);

  // jump_probes_map.cpp: the area's memfd and mappings, in the tracee and here.
  Area map_area(RuntimeAddr near);
  Area map_area_in(RuntimeAddr near);  // map_area's, in one lending
  CallBuffer map_call_buffer(const jump::CallBufferLayout& layout);
  void unmap_area(Area& area);
  long tracee_syscall(long nr, const std::array<long, 6>& args, const char* what);
  // `body` with one thread lent to every tracee_syscall it makes: the memfd_create, mmaps and
  // close of an area pay one stop of the others, one way back and one park.
  void lent_once(const char* what, const std::function<void()>& body);

  TracedProcess& proc_;
  JumpOptions options_;
  jump::AreaConfig config_;
  jump::AreaLayout layout_;
  bool rseq_read_ = false;
  std::string rseq_why_;
  std::optional<RseqRegistration> rseq_;
  CallBuffer call_buffer_;
  jump::CallBufferLayout call_layout_;
  std::unique_ptr<jump::CallReader> call_reader_;
  std::string calls_refused_;
  // Stack snapshots' buffer: the only one of probes that take stacks, the second beside calls.
  CallBuffer stack_buffer_;
  jump::CallBufferLayout stack_layout_;
  std::unique_ptr<jump::CallReader> stack_reader_;
  std::string stacks_refused_;
  std::string warm_why_;
  std::vector<Area> areas_;
  std::vector<Probe> probes_;
  std::string mapping_refused_;
  // Frames walked per thread looking for signal frames: a handler is rarely deeper than this.
  static constexpr unsigned kSignalWalkFrames = 256;
  std::unique_ptr<StackCollector> unwinder_;  // for signal frames, made at the first need
  std::uint64_t unbounded_threads_ = 0;
  std::map<pid_t, std::uint64_t> stack_tps_;  // the thread pointer each entered thread has
  std::map<std::string, std::shared_ptr<const ModuleCode>> modules_;  // module_of()
  std::uint64_t modules_at_ = 0;  // Task::resumes() when modules_ was begun
};

}  // namespace probecost
