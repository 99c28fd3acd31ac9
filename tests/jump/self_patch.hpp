#pragma once
// Jump-patched probes inside the test process itself, no ptrace: this process plays both the
// tracee (its own functions are patched and called) and the tracer (it writes through
// /proc/self/mem, maps the area twice, reads counters and drains the ring).
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/call_buffer.hpp"
#include "breakpoint/in_tracee/jump_area.hpp"
#include "breakpoint/jump/exit_plan.hpp"
#include "breakpoint/jump/patch_site.hpp"
#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost::selftest {

// This process's memory through /proc/self/mem: like the tracer's ProcMemory, it writes
// read-only text (FOLL_FORCE).
class SelfMemory final : public TraceeMemory {
 public:
  SelfMemory();
  ~SelfMemory() override;
  static SelfMemory& instance();
  SelfMemory(const SelfMemory&) = delete;
  SelfMemory& operator=(const SelfMemory&) = delete;
  void read(RuntimeAddr at, std::span<std::uint8_t> out) override;
  void write(RuntimeAddr at, std::span<const std::uint8_t> bytes) override;

 private:
  int fd_ = -1;
};

// A jump area in a memfd, mapped twice as the lead's tracer will: read-write anywhere (the
// tracer's view, through which AreaWriter writes), and within reach of `near` (the tracee's
// view: the header and ring read-write, the code read-exec), where the trampolines run.
class LocalArea {
 public:
  LocalArea(RuntimeAddr near, const jump::AreaConfig& config);
  ~LocalArea();
  LocalArea(const LocalArea&) = delete;
  LocalArea& operator=(const LocalArea&) = delete;

  jump::AreaWriter& writer() { return *writer_; }
  RuntimeAddr tracee_address() const { return tracee_; }
  std::span<const std::uint8_t> tracer_view() const { return {view_, size_}; }

 private:
  std::size_t size_ = 0;
  std::uint8_t* view_ = nullptr;
  RuntimeAddr tracee_;
  std::unique_ptr<jump::AreaWriter> writer_;
};

// Site options as the tests give them: an id, events or not, how the flags are kept.
inline jump::SiteOptions site_options(std::uint32_t id, bool events = false,
                                      FlagSave save = FlagSave::Lahf) {
  jump::SiteOptions o;
  o.id = id;
  o.events = events;
  o.flag_save = save;
  return o;
}

// A call buffer in this process: one shared mapping is both the tracee's and the tracer's view.
class LocalCallBuffer {
 public:
  explicit LocalCallBuffer(const jump::CallBufferConfig& config);
  ~LocalCallBuffer();
  LocalCallBuffer(const LocalCallBuffer&) = delete;
  LocalCallBuffer& operator=(const LocalCallBuffer&) = delete;

  const jump::CallBufferLayout& layout() const { return layout_; }
  std::span<std::uint8_t> view() const { return {view_, layout_.size}; }
  // Where trampolines write records of probe `id` (this process's glibc rseq registration).
  CallRecordTarget target(std::uint32_t id) const;

 private:
  jump::CallBufferLayout layout_;
  std::uint8_t* view_ = nullptr;
};

// glibc registered rseq for this process's threads (__rseq_size, as the tracer reads it from a
// tracee).
bool have_rseq();

// A function of this process patched for call records: its entry and every exit as
// plan_calls() planned them (none of them an int3: the caller chooses such functions).
struct CallPatch {
  CallPlans plans;
  std::vector<std::unique_ptr<PatchSite>> sites;
  void install();
  void remove();
};
std::unique_ptr<CallPatch> patch_calls(const std::string& function, std::uint32_t id,
                                       LocalArea& area, const LocalCallBuffer& buffer);

// A function of this process, from its ELF symbol (as the tracer reads it), and its bytes.
struct Function {
  RuntimeAddr start;
  std::vector<std::uint8_t> code;
};
Function function_named(const std::string& name);
RuntimeAddr address_of(const std::string& name);

// What a tracer does around install() and remove() while threads run, done in-process:
// - serialize(): membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE);
// - evacuate(): SIGUSR1 to each worker; its handler moves it out of the patched range into the
//   trampoline's copy when it is between two displaced instructions, and acknowledges;
// - a SIGTRAP handler sends a thread that trapped on the int3 at byte 0 into the trampoline.
// One instance at a time (signal handlers need globals).
class ThreadSync final : public CodeSync {
 public:
  ThreadSync();
  ~ThreadSync() override;
  ThreadSync(const ThreadSync&) = delete;
  ThreadSync& operator=(const ThreadSync&) = delete;

  // The site being installed or removed, and its trampoline.
  void watch(const PatchSite& site, const Trampoline& trampoline);
  void add_worker(pthread_t thread) { workers_.push_back(thread); }
  void serialize() override;
  void evacuate(RuntimeAddr site, std::size_t length) override;

  static std::uint64_t traps();  // threads sent from the int3 to the trampoline
  static std::uint64_t moved();  // threads moved out of a patched range

 private:
  void signal_workers();
  std::vector<pthread_t> workers_;
  bool membarrier_ = false;
};

}  // namespace probecost::selftest
