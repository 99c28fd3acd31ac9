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

#include "breakpoint/jump_area.hpp"
#include "breakpoint/patch_site.hpp"
#include "breakpoint/tracee_memory.hpp"

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
