#include "tracer/os/memory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "common/error.hpp"
#include "tracer/os/fault_plan.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

ProcMemory::ProcMemory(pid_t pid) : pid_(pid) {
  reopen();
}

ProcMemory::~ProcMemory() {
  if (fd_ >= 0) ::close(fd_);
}

void ProcMemory::reopen() {
  if (fd_ >= 0) ::close(fd_);
  std::string path = "/proc/" + std::to_string(pid_) + "/mem";
  fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0 && errno == ESRCH) {
    // A zombie leader has no memory of its own any more, but its live threads share it: any
    // of them gives the same address space (the fd keeps it, whoever exits later).
    std::string dir = "/proc/" + std::to_string(pid_) + "/task";
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        fd_ = ::open((dir + "/" + e->d_name + "/mem").c_str(), O_RDWR | O_CLOEXEC);
        if (fd_ >= 0) break;
      }
      ::closedir(d);
    }
    if (fd_ < 0) errno = ESRCH;
  }
  if (fd_ < 0) throw Error::from_errno("cannot open " + path);
}

void ProcMemory::read(RuntimeAddr at, std::span<std::uint8_t> out) {
  fault_plan::before_call();
  ++sys::counters().memory;
  ssize_t n;
  do n = ::pread(fd_, out.data(), out.size(), static_cast<off_t>(at.value()));
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(out.size())) {
    throw Error::from_errno("cannot read " + std::to_string(out.size()) + " bytes at " + at.hex() +
                                " in process " + std::to_string(pid_),
                            n < 0 ? errno : EIO);
  }
}

void ProcMemory::write(RuntimeAddr at, std::span<const std::uint8_t> bytes) {
  fault_plan::before_call();
  ++sys::counters().memory;
  ssize_t n;
  do n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(at.value()));
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(bytes.size())) {
    throw Error::from_errno("cannot write " + std::to_string(bytes.size()) + " bytes at " +
                                at.hex() + " in process " + std::to_string(pid_),
                            n < 0 ? errno : EIO);
  }
}

}  // namespace probecost
