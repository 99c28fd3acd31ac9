#include "cli/output.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>

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

mode_t creation_mode(mode_t full) {
  mode_t mask = ::umask(022);
  ::umask(mask);
  return full & ~mask;
}

namespace {

// A name in `dir` that does not exist yet (linkat makes it, or fails with EEXIST).
std::string random_name(const std::string& dir, const std::string& prefix) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::string s = prefix;
  for (int i = 0; i < 6; ++i) s += kChars[rd() % (sizeof kChars - 1)];
  return (std::filesystem::path(dir) / s).string();
}

}  // namespace

void link_onto(int fd, const std::string& dir, const std::string& prefix,
               const std::string& target) {
  // Through /proc/self/fd, which needs no privilege, else AT_EMPTY_PATH (CAP_DAC_READ_SEARCH).
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  std::string name;
  for (int tries = 0; name.empty(); ++tries) {
    std::string n = random_name(dir, prefix);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, n.c_str(), AT_SYMLINK_FOLLOW) == 0 ||
        ::linkat(fd, "", AT_FDCWD, n.c_str(), AT_EMPTY_PATH) == 0)
      name = n;
    else if (errno != EEXIST || tries > 100)
      throw Error::from_errno("cannot link " + target + " in " + dir);
  }
  if (::rename(name.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(name.c_str());
    throw Error::from_errno("cannot put " + target + " in place (rename)", err);
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

// A new or regular file: an unnamed file in its directory, renamed onto it at the end. False
// (nothing done) where that cannot be had: the caller opens the path itself, and says why not.
bool Output::open_temporary(const std::string& path) {
  namespace fs = std::filesystem;
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) return false;
  std::error_code ec;
  // A symlink's target is what is replaced: the link stays.
  std::string target = exists ? fs::canonical(path, ec).string() : path;
  if (ec) return false;
  fs::path parent = fs::path(target).parent_path();
  std::string dir = parent.empty() ? "." : parent.string();
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  // The kernel's file systems have no O_TMPFILE (the open at the path is then refused, below).
  if (kernel_file_system(fd)) {
    ::close(fd);
    return false;
  }
  fd_ = fd;
  own_fd_ = true;
  target_ = target;
  dir_ = dir;
  replaces_ = exists;
  mode_ = exists ? (st.st_mode & 07777) : creation_mode(0666);
  uid_ = exists ? st.st_uid : 0;
  gid_ = exists ? st.st_gid : 0;
  return true;
}

Output::Output(const std::string& path, int default_fd) : path_(path), fd_(default_fd) {
  if (path.empty() || path == "-") return;
  if (open_temporary(path)) return;
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

bool Output::file_id(struct stat& st) const {
  if (!target_.empty()) return ::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  return own_fd_ && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
}

std::string Output::resolved() const {
  std::error_code ec;
  if (!target_.empty()) return std::filesystem::weakly_canonical(target_, ec).string();
  struct stat st;
  return file_id(st) ? std::filesystem::weakly_canonical(path_, ec).string() : "";
}

void Output::refuse_same_file(const Output& other, const std::string& what,
                              const std::string& other_what) const {
  if (!own_fd_ || !other.own_fd_) return;
  struct stat a, b;
  // Two regular files only: /dev/null twice is no clash. Files not made yet, by their paths.
  bool same = (file_id(a) && other.file_id(b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino) ||
              (!resolved().empty() && resolved() == other.resolved());
  if (same) {
    throw UsageError(what + " '" + path_ + "' and " + other_what + " '" + other.path_ +
                     "' are the same file: one would overwrite the other (give two files)");
  }
}

void Output::refuse_same_path(const std::string& other, const std::string& what,
                              const std::string& other_what) const {
  if (!own_fd_) return;
  struct stat a, b;
  std::error_code ec;
  bool same =
      (file_id(a) && ::stat(other.c_str(), &b) == 0 && S_ISREG(b.st_mode) && a.st_dev == b.st_dev &&
       a.st_ino == b.st_ino) ||
      (!resolved().empty() && resolved() == std::filesystem::weakly_canonical(other, ec).string());
  if (same) {
    throw UsageError(what + " '" + path_ + "' and " + other_what + " '" + other +
                     "' are the same file: one would overwrite the other (give two files)");
  }
}

Output::~Output() {
  if (!own_fd_) return;
  ::close(fd_);
  if (created_ && !written_) ::unlink(path_.c_str());
}

void Output::write_temporary(const std::string& text) {
  const std::string name = "'" + path_ + "'";
  if (::ftruncate(fd_, 0) < 0 || ::lseek(fd_, 0, SEEK_SET) < 0)
    throw Error::from_errno("cannot write the report to " + name);
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error::from_errno("cannot write the report to " + name, n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  // Written back before it is named: an I/O error is seen here, with the path left as it was.
  if (::fdatasync(fd_) < 0) throw Error::from_errno("cannot write the report to " + name);
  ::fchmod(fd_, mode_);
  // Root replacing another user's file: the new one is still theirs (if that fails, root's).
  if (replaces_ && ::geteuid() == 0) (void)!::fchown(fd_, uid_, gid_);
  std::string prefix(".");
  prefix.append(std::filesystem::path(target_).filename().string());
  prefix.append(".probecost-");
  link_onto(fd_, dir_, prefix, target_);
  written_ = true;
}

void Output::write(const std::string& text) {
  if (!target_.empty()) {
    std::cout.flush();  // anything printed through iostreams goes first
    std::cerr.flush();
    return write_temporary(text);
  }
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
