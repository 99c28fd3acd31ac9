#include "cli/output.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "common/error.hpp"

namespace probecost::cli {

// The kernel's own file systems, whose files are interfaces, not storage: /proc/version takes
// an open for writing from root and then refuses every write (the report lost after the whole
// trace), and a writable one (/proc/sys/..., /sys/...) would take the report as a setting.
const char* kernel_file_system(int fd) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return nullptr;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case PROC_SUPER_MAGIC:
      return "proc";
    case SYSFS_MAGIC:
      return "sysfs";
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
      return "cgroup";
    case DEBUGFS_MAGIC:
      return "debugfs";
    case TRACEFS_MAGIC:
      return "tracefs";
    case SECURITYFS_MAGIC:
      return "securityfs";
    case BPF_FS_MAGIC:
      return "bpf";
    case PSTOREFS_MAGIC:
      return "pstore";
    case EFIVARFS_MAGIC:
      return "efivarfs";
    default:
      return nullptr;
  }
}

Output::Output(const std::string& path, int default_fd) : path_(path), fd_(default_fd) {
  if (path.empty() || path == "-") return;
  // O_EXCL first, to know whether the file is ours to remove if the run fails.
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ >= 0) {
    created_ = true;
  } else if (errno == EEXIST) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  }
  if (fd_ < 0) {
    throw UsageError("cannot write the report to '" + path + "': " + std::strerror(errno));
  }
  if (const char* fs = kernel_file_system(fd_)) {
    ::close(fd_);
    if (created_) ::unlink(path.c_str());
    throw UsageError("cannot write the report to '" + path + "': it is a file of the kernel's " +
                     fs + " file system (give a regular file, a pipe or a terminal)");
  }
  own_fd_ = true;
}

Output::~Output() {
  if (!own_fd_) return;
  ::close(fd_);
  if (created_ && !written_) ::unlink(path_.c_str());
}

void Output::write(const std::string& text) {
  std::string name = own_fd_ ? "'" + path_ + "'" : fd_ == 2 ? "standard error" : "standard output";
  std::cout.flush();  // anything printed through iostreams goes first
  std::cerr.flush();
  struct stat st;
  if (own_fd_ && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) &&
      (::ftruncate(fd_, 0) < 0 || ::lseek(fd_, 0, SEEK_SET) < 0)) {
    throw Error::from_errno("cannot write the report to " + name);
  }
  written_ = true;
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error::from_errno("cannot write the report to " + name, n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (own_fd_ && ::fsync(fd_) < 0 && errno != EINVAL && errno != EROFS) {
    throw Error::from_errno("cannot write the report to " + name);
  }
}

}  // namespace probecost::cli
