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

namespace {

// What a path names that no report can go to, or nullptr: a block device (a disk, whose
// contents the report would overwrite).
const char* unfit_file(int fd) {
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISBLK(st.st_mode)) return "it is a block device";
  return nullptr;
}

}  // namespace

Output::Output(const std::string& path, int default_fd) : path_(path), fd_(default_fd) {
  if (path.empty() || path == "-") return;
  // O_NONBLOCK: the open of a FIFO for writing waits for a reader, for ever if there is none
  // (the target never attached, nothing said); without blocking it fails at once, ENXIO, as the
  // open of a socket's file does. O_EXCL first, to know whether the file is ours to remove if
  // the run fails.
  int flags = O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  fd_ = ::open(path.c_str(), flags | O_CREAT | O_EXCL, 0666);
  if (fd_ >= 0) {
    created_ = true;
  } else if (errno == EEXIST) {
    fd_ = ::open(path.c_str(), flags);
  }
  if (fd_ < 0 && errno == ENXIO) {
    throw UsageError("cannot write the report to '" + path +
                     "': it is a FIFO that no process reads, or a socket (open the FIFO's reader "
                     "first, or give a regular file)");
  }
  if (fd_ < 0) {
    throw UsageError("cannot write the report to '" + path + "': " + std::strerror(errno));
  }
  const char* fs = kernel_file_system(fd_);
  const char* unfit = unfit_file(fd_);
  if (fs || unfit) {
    ::close(fd_);
    if (created_) ::unlink(path.c_str());
    throw UsageError("cannot write the report to '" + path + "': " +
                     (fs ? "it is a file of the kernel's " + std::string(fs) + " file system"
                         : std::string(unfit)) +
                     " (give a regular file, a pipe or a terminal)");
  }
  // Writes block again (a pipe's reader that is slow is waited for).
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  own_fd_ = true;
}

void Output::refuse_same_file(const Output& other, const std::string& what,
                              const std::string& other_what) const {
  struct stat a, b;
  if (!own_fd_ || !other.own_fd_ || ::fstat(fd_, &a) != 0 || ::fstat(other.fd_, &b) != 0) return;
  // Two regular files only: /dev/null twice is no clash.
  if (S_ISREG(a.st_mode) && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    throw UsageError(what + " '" + path_ + "' and " + other_what + " '" + other.path_ +
                     "' are the same file: one would overwrite the other (give two files)");
  }
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
  bool regular = own_fd_ && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  if (regular && (::ftruncate(fd_, 0) < 0 || ::lseek(fd_, 0, SEEK_SET) < 0)) {
    throw Error::from_errno("cannot write the report to " + name);
  }
  // A failed write leaves no partial report: a file this run created goes (the destructor
  // removes it, as written_ is still false), one it did not is emptied (and said so).
  auto failed = [&](int err) {
    std::string left = regular && !created_ && ::ftruncate(fd_, 0) == 0 ? " (left empty)" : "";
    return Error::from_errno("cannot write the report to " + name + left, err);
  };
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw failed(n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  if (own_fd_ && ::fsync(fd_) < 0 && errno != EINVAL && errno != EROFS) throw failed(errno);
  written_ = true;
}

}  // namespace probecost::cli
