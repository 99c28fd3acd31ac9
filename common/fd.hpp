#pragma once
// Fd: a file descriptor of ours, closed however we leave.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.hpp"

namespace probecost {

class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  // open(2), close-on-exec. Error when it cannot be opened: a path the user gave is checked
  // where it is parsed (cli/), and exit 2 is decided there, not here.
  static Fd open(const std::string& path, int flags) {
    Fd fd(::open(path.c_str(), flags | O_CLOEXEC));
    if (!fd) throw Error("cannot open " + path + ": " + std::strerror(errno));
    return fd;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_;
};

}  // namespace probecost
