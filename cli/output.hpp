#pragma once
// Where a command writes its report: -o FILE or standard output. The file is opened before
// anything runs, so that `-o /nonexistent/x` or `-o /tmp` fail at once (UsageError, exit 2)
// instead of after a whole trace; a write that fails later (`-o /dev/full`, a full disk, a
// closed stdout) is an Error (exit 1), never silent.
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
  // cannot be written.
  void write(const std::string& text);

 private:
  std::string path_;
  int fd_ = 1;
  bool own_fd_ = false;
  bool created_ = false;
  bool written_ = false;
};

}  // namespace probecost::cli
