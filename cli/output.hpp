#pragma once
// Where a command writes its report: -o FILE or standard output. The file is opened before
// anything runs, so that `-o /nonexistent/x`, `-o /tmp`, a FIFO nobody reads (whose open would
// wait for ever) or a block device fail at once (UsageError, exit 2) instead of after a whole
// trace; a write that fails later (`-o /dev/full`, a full disk, a closed stdout) is an Error
// (exit 1), never silent, and leaves no partial file.
//
// A regular file (new, or replaced) is written into an unnamed file (O_TMPFILE) in its
// directory and renamed onto the path once whole, so that a probecost killed at any moment
// (SIGKILL) leaves the path as it was, or the whole report: never an empty or cut-off one. Where
// the file system has no O_TMPFILE, the file is opened at the path and written in place.
#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace probecost::cli {

// The name of the kernel's file system (proc, sysfs, ...) that the open file `fd` is on, or
// nullptr for storage: such a file is an interface, never a place for a report.
const char* kernel_file_system(int fd);

// The unnamed file `fd` (O_TMPFILE) linked into `dir` under a temporary name (`prefix` +
// 6 characters), then renamed onto `target`: Error when either cannot be done (nothing is left
// under the temporary name).
void link_onto(int fd, const std::string& dir, const std::string& prefix,
               const std::string& target);
// What a file this run creates gets: `full` (0666, 0777) less the umask.
mode_t creation_mode(mode_t full);

class Output {
 public:
  // "" or "-": `default_fd` (standard output unless said otherwise). Otherwise the file is opened
  // for writing (created if need be, not truncated yet: a run that fails leaves an existing file as
  // it was, and removes one it created).
  explicit Output(const std::string& path, int default_fd = 1);
  ~Output();
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // Replaces the file's contents with `text` (or writes it to stdout); Error when any byte
  // cannot be written (then a file this run created is removed, one it did not is left empty).
  void write(const std::string& text);

  // Someone else (record's writers) fills the file by its path: it is kept at the end. Until
  // then the open file descriptor holds a FIFO's reader, and a failed run removes a file it
  // created.
  void keep() { written_ = true; }

  // UsageError when this and `other` are one regular file (by device and inode: a symlink or a
  // hard link is no other file); `what` and `other_what` name the options.
  void refuse_same_file(const Output& other, const std::string& what,
                        const std::string& other_what) const;
  // Likewise against a path that another writer fills (record's trace file).
  void refuse_same_path(const std::string& other, const std::string& what,
                        const std::string& other_what) const;

 private:
  // The regular file this writes, as it is now (false when none: a stream, or a new file).
  bool file_id(struct stat& st) const;
  // The path this replaces, resolved ("" for a stream).
  std::string resolved() const;
  bool open_temporary(const std::string& path);
  void write_temporary(const std::string& text);

  std::string path_;
  std::string target_;  // written through a temporary: the file replaced at the end
  std::string dir_;     // its directory
  mode_t mode_ = 0;     // the file's mode at the end
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  bool replaces_ = false;  // target_ exists
  int fd_ = 1;
  bool own_fd_ = false;
  bool created_ = false;
  bool written_ = false;
};

}  // namespace probecost::cli
