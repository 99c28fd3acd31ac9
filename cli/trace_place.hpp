#pragma once
// Where `probecost record` writes its trace, and how it gets to the user's path whole.
//
// A trace is never written at PATH itself while it grows: a probecost that dies (SIGKILL, the
// OOM killer, a crash) must leave no cut-off trace there, no Chrome JSON that does not parse, no
// CTF directory with half a stream. So:
//   - a Chrome file (new, or an existing regular file) is written to an unnamed file
//     (O_TMPFILE) in PATH's directory, which the kernel frees whatever kills us, and linked in at
//     the end under a temporary name, then rename(2)d onto PATH (a symlink's target is replaced,
//     the link stays). Where the file system has no O_TMPFILE, a named `.NAME.probecost-XXXXXX`.
//   - a new CTF directory is made as `.NAME.probecost-XXXXXX` beside PATH and renamed to PATH at
//     the end; into an existing empty directory, the trace is made in `PATH/.probecost-XXXXXX`
//     and its files moved up at the end, `metadata` last (a directory without `metadata` is no
//     trace to any reader).
//   - a FIFO or a character device (/dev/null) is a stream: written as it goes, nothing renamed.
// A named temporary is held with flock(2) for the run; the next `record` to the same PATH
// removes any that no live probecost holds (the kernel drops the lock of a killed process).
//
// perf record and uftrace record (checked in their sources) instead move an existing output
// aside (perf.data -> perf.data.old, uftrace.data -> uftrace.data.old) and write the new one in
// place, so a killed run leaves a cut-off perf.data / uftrace.data there.
#include <sys/stat.h>

#include <string>

#include "common/fd.hpp"
#include "record/recorder.hpp"

namespace probecost::cli {

class TracePlace {
 public:
  // Checks `path` for `format` (UsageError naming the path and why: a directory for a Chrome
  // file, a file for a CTF directory, a directory not empty, not writable, on the kernel's file
  // systems, a FIFO without a reader, a block device or a socket) and makes the temporary. Stale
  // temporaries of PATH are removed first, said in `notes`.
  TracePlace(const std::string& path, record::TraceFormat format, std::string& notes);
  // Not committed: the temporary goes (a stream is left as it got it).
  ~TracePlace();
  TracePlace(const TracePlace&) = delete;
  TracePlace& operator=(const TracePlace&) = delete;

  // Chrome: the file to write into (not ours to close). -1 for CTF.
  int fd() const { return file_.get(); }
  // CTF: the directory the writer fills.
  const std::string& dir() const { return work_dir_; }
  // Where the raw records wait (call_drain.hpp): on the trace's file system; for a stream,
  // $TMPDIR or /var/tmp.
  const std::string& spool_dir() const { return spool_dir_; }
  // A FIFO or a character device: written as it goes, nothing to rename or remove.
  bool stream() const { return kind_ == Kind::stream; }
  // The file a Chrome trace replaces at the end ("" for a stream or a directory).
  std::string file_target() const { return kind_ == Kind::file ? target_ : ""; }

  // The trace is complete: into place at PATH (Error when it cannot be; the temporary goes).
  void commit();

 private:
  enum class Kind { file, stream, new_dir, into_dir };
  void place_file(const struct stat* st);
  void place_dir(const struct stat* st, std::string& notes);
  void commit_file();
  void commit_dir();

  std::string path_;       // as the user gave it
  std::string target_;     // what is replaced at the end (a symlink resolved)
  std::string parent_;     // the directory the temporary is in
  std::string temp_name_;  // a named temporary's full path ("" for O_TMPFILE)
  std::string work_dir_;   // CTF: the temporary directory
  std::string spool_dir_;
  Kind kind_ = Kind::file;
  Fd file_;  // Chrome: the file written
  Fd lock_;  // CTF: the temporary directory, flock()ed
  bool committed_ = false;
};

}  // namespace probecost::cli
