#include "cli/trace_place.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cli/output.hpp"
#include "common/error.hpp"

namespace probecost::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kTag = ".probecost-";

std::string errno_text(int err = errno) {
  return std::strerror(err);
}

// "a/b/" -> "a/b"; "/" stays.
std::string without_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// ".NAME.probecost-": the temporaries of NAME. (Appended, not a + chain: GCC 12's -Wrestrict
// warns wrongly on one.)
std::string hidden_prefix(const std::string& base) {
  std::string s(".");
  s.append(base);
  s.append(kTag);
  return s;
}

std::string parent_of(const std::string& p) {
  fs::path parent = fs::path(p).parent_path();
  return parent.empty() ? "." : parent.string();
}

std::string base_of(const std::string& p) {
  return fs::path(p).filename().string();
}

// The directory a temporary goes in: writable, searchable, on storage.
void check_dir(const std::string& dir, const std::string& path) {
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError("-o " + path + ": cannot write in " + dir + ": " + errno_text());
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw UsageError("-o " + path + ": " + dir + ": " + errno_text());
  if (const char* kernel = kernel_file_system(fd.get()))
    throw UsageError("-o " + path + ": " + dir + " is on the kernel's " + kernel +
                     " file system (give a place on storage)");
}

// Temporaries named `prefix` + 6 characters in `dir` that no live probecost holds (a flock is
// dropped with its process, however it died): removed, and said.
void remove_stale(const std::string& dir, const std::string& prefix, std::string& notes) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    // O_NOFOLLOW: a symlink of that name is not ours to follow (remove_all takes the link only).
    Fd fd(::open(e.path().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    fs::remove_all(e.path(), ec);
    if (!ec)
      notes += "probecost record: removed " + e.path().string() +
               ", a partial trace left by a probecost record that was killed\n";
  }
}

// `dir`/`prefix`XXXXXX, for mkostemp or mkdtemp.
std::string temp_path(const std::string& dir, const std::string& prefix) {
  return (fs::path(dir) / (prefix + "XXXXXX")).string();
}

}  // namespace

TracePlace::TracePlace(const std::string& path, record::TraceFormat format, std::string& notes)
    : path_(path) {
  if (path.empty()) throw UsageError("no output: give -o PATH");
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) throw UsageError("-o " + path + ": " + errno_text());
  target_ = without_trailing_slashes(path);
  // A symlink's target is what is replaced: the link stays.
  if (exists) target_ = fs::canonical(target_).string();
  parent_ = parent_of(target_);
  const std::string base = base_of(target_);
  if (format == record::TraceFormat::chrome) {
    if (exists && S_ISDIR(st.st_mode))
      throw UsageError("-o " + path +
                       ": is a directory (a Chrome JSON trace is a file: give a file name, or "
                       "--format ctf for a CTF trace in it)");
    if (!exists && path.back() == '/')
      throw UsageError("-o " + path +
                       ": ends in '/', a directory (a Chrome JSON trace is a file: give its name "
                       "without the '/', or --format ctf)");
    if (!(exists && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))))
      remove_stale(parent_, hidden_prefix(base), notes);
    place_file(exists ? &st : nullptr);
  } else {
    if (exists && !S_ISDIR(st.st_mode))
      throw UsageError("-o " + path +
                       ": not a directory (a CTF trace is one: give a new name or an empty "
                       "directory, or --format chrome for a file)");
    place_dir(exists ? &st : nullptr, notes);
  }
}

void TracePlace::place_file(const struct stat* st) {
  if (st && (S_ISFIFO(st->st_mode) || S_ISCHR(st->st_mode))) {
    kind_ = Kind::stream;
    // O_NONBLOCK: the open of a FIFO for writing waits for a reader, for ever if there is none;
    // without it, it fails at once (ENXIO).
    file_ = Fd(::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!file_ && errno == ENXIO)
      throw UsageError("-o " + path_ +
                       ": it is a FIFO that no process reads (open the FIFO's reader first, or "
                       "give a regular file)");
    if (!file_) throw UsageError("-o " + path_ + ": " + errno_text());
    if (const char* kernel = kernel_file_system(file_.get()))
      throw UsageError("-o " + path_ + ": it is a file of the kernel's " + std::string(kernel) +
                       " file system (give a regular file, a FIFO or a device)");
    ::fcntl(file_.get(), F_SETFL, ::fcntl(file_.get(), F_GETFL) & ~O_NONBLOCK);
    const char* tmp = std::getenv("TMPDIR");
    spool_dir_ = tmp && *tmp ? tmp : "/var/tmp";
    return;
  }
  if (st && !S_ISREG(st->st_mode))
    throw UsageError("-o " + path_ + ": " +
                     (S_ISBLK(st->st_mode) ? "it is a block device" : "it is a socket") +
                     " (give a regular file, a FIFO or a character device)");
  kind_ = Kind::file;
  check_dir(parent_, path_);
  spool_dir_ = parent_;
  // An existing file's mode (and owner, for root) stay the file's.
  mode_t mode = st ? (st->st_mode & 07777) : creation_mode(0666);
  file_ = Fd(::open(parent_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600));
  if (!file_) {
    // No O_TMPFILE here (EOPNOTSUPP; EISDIR on kernels before 3.11): a name, locked.
    temp_name_ = temp_path(parent_, hidden_prefix(base_of(target_)));
    file_ = Fd(::mkostemp(temp_name_.data(), O_CLOEXEC));
    if (!file_)
      throw UsageError("-o " + path_ + ": cannot create a file in " + parent_ + ": " +
                       errno_text());
  }
  // Locked, as a named one: linked in at the end, the name is taken for no dead run's.
  ::flock(file_.get(), LOCK_EX | LOCK_NB);
  ::fchmod(file_.get(), mode);
  // Root replacing another user's file: the new one is still theirs (if that fails, root's).
  if (st && ::geteuid() == 0) (void)!::fchown(file_.get(), st->st_uid, st->st_gid);
}

void TracePlace::place_dir(const struct stat* st, std::string& notes) {
  if (st) {
    // An empty directory of the user's: the trace is made inside it and moved up at the end
    // (it may be a mount point, which no rename replaces).
    kind_ = Kind::into_dir;
    check_dir(target_, path_);
    remove_stale(target_, kTag, notes);
    std::error_code ec;
    if (!fs::is_empty(target_, ec))
      throw UsageError("-o " + path_ +
                       ": exists and is not empty: a CTF trace needs a directory of its own");
    parent_ = target_;
    work_dir_ = temp_path(target_, kTag);
  } else {
    kind_ = Kind::new_dir;
    check_dir(parent_, path_);
    remove_stale(parent_, hidden_prefix(base_of(target_)), notes);
    work_dir_ = temp_path(parent_, hidden_prefix(base_of(target_)));
  }
  if (!::mkdtemp(work_dir_.data()))
    throw UsageError("-o " + path_ + ": cannot create a directory in " + parent_ + ": " +
                     errno_text());
  ::chmod(work_dir_.c_str(), creation_mode(0777));
  lock_ = Fd(::open(work_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (lock_) ::flock(lock_.get(), LOCK_EX | LOCK_NB);
  spool_dir_ = parent_;
}

TracePlace::~TracePlace() {
  if (committed_) return;
  std::error_code ec;
  if (!temp_name_.empty()) ::unlink(temp_name_.c_str());
  if (!work_dir_.empty()) fs::remove_all(work_dir_, ec);
}

void TracePlace::commit_file() {
  // Written back before it is named: an I/O error (EIO) of the page cache's writeback is seen
  // here, not after the trace is at PATH.
  if (::fdatasync(file_.get()) != 0) throw Error::from_errno("cannot write the trace " + path_);
  if (temp_name_.empty()) {
    link_onto(file_.get(), parent_, hidden_prefix(base_of(target_)), target_);
    return;
  }
  if (::rename(temp_name_.c_str(), target_.c_str()) != 0)
    throw Error::from_errno("cannot put the trace at " + path_ + " (rename " + temp_name_ + ")");
  temp_name_.clear();
}

void TracePlace::commit_dir() {
  if (kind_ == Kind::new_dir) {
    if (::rename(work_dir_.c_str(), target_.c_str()) != 0)
      throw Error::from_errno("cannot put the trace at " + path_ + " (rename " + work_dir_ + ")");
    work_dir_.clear();
    return;
  }
  // Into the user's directory: the streams first, the metadata last.
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(work_dir_, ec))
    if (e.path().filename() != "metadata") files.push_back(e.path());
  files.push_back(fs::path(work_dir_) / "metadata");
  for (const auto& f : files) {
    fs::path to = fs::path(target_) / f.filename();
    if (::rename(f.c_str(), to.c_str()) != 0)
      throw Error::from_errno("cannot put the trace at " + path_ + " (rename " + f.string() + ")");
  }
  fs::remove_all(work_dir_, ec);
  work_dir_.clear();
}

void TracePlace::commit() {
  if (committed_) return;
  if (kind_ == Kind::file) commit_file();
  if (kind_ == Kind::new_dir || kind_ == Kind::into_dir) commit_dir();
  committed_ = true;
}

}  // namespace probecost::cli
