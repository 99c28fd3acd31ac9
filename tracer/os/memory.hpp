#pragma once
// Tracee memory through /proc/PID/mem: one pread/pwrite per transfer of any size. Unlike
// process_vm_writev, a write through /proc/PID/mem by the tracer goes through FOLL_FORCE and
// can patch read-only text (the kernel makes a private copy of the page, as for POKETEXT).
#include <sys/types.h>

#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost {

class ProcMemory final : public TraceeMemory {
 public:
  explicit ProcMemory(pid_t pid);
  ~ProcMemory() override;
  ProcMemory(const ProcMemory&) = delete;
  ProcMemory& operator=(const ProcMemory&) = delete;

  void read(RuntimeAddr at, std::span<std::uint8_t> out) override;
  void write(RuntimeAddr at, std::span<const std::uint8_t> bytes) override;
  // After exec the old address space is gone: reopen for the new one.
  void reopen();
  int fd() const { return fd_; }

 private:
  pid_t pid_;
  int fd_ = -1;
};

}  // namespace probecost
