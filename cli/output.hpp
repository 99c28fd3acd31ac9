#pragma once
// Where a command writes its report: -o FILE or standard output. The file is opened before
// anything runs, so that `-o /nonexistent/x`, `-o /tmp`, a FIFO nobody reads (whose open would
// wait for ever) or a block device fail at once (UsageError, exit 2) instead of after a whole
// trace; a write that fails later (`-o /dev/full`, a full disk, a closed stdout) is an Error
// (exit 1), never silent, and leaves no partial file.
#include <string>

namespace probecost::cli {

// The name of the kernel's file system (proc, sysfs, ...) that the open file `fd` is on, or
// nullptr for storage: such a file is an interface, never a place for a report.
const char* kernel_file_system(int fd);

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

 private:
  std::string path_;
  int fd_ = 1;
  bool own_fd_ = false;
  bool created_ = false;
  bool written_ = false;
};

}  // namespace probecost::cli
