#pragma once
// A module's code as its ELF file holds it, for planning jump patches. Never the process's
// memory: that holds the int3 bytes and jumps probecost wrote (and perhaps those a probecost
// that was killed left), and a plan decoded from them is nonsense.
//
// Read once per file for the whole run (every process that maps it: fork and exec children),
// in the file's own addresses, so that it holds wherever ASLR put the module:
// - the bytes of its executable segments;
// - every direct jmp, jcc and call in them, by target (BranchIndex; cached on disk per
//   build-id, tracer/jump/branch_cache.hpp);
// - every C++ landing pad its .eh_frame and LSDAs name (EhTables), which the unwinder enters
//   with no branch instruction to say so.
// The file is the one mapped (through /proc/PID/map_files where we may), keyed by device,
// inode, size and modification time: an inode number can be reused by a new file.
#include <sys/types.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/x86/branch_scan.hpp"
#include "breakpoint/x86/eh_tables.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

class ModuleCode {
 public:
  // The module that mapping `m` of process `pid` maps. Nothing, with the reason in `why`, when
  // its file cannot be opened or read as an ELF file.
  static std::shared_ptr<const ModuleCode> of(pid_t pid, const Mapping& m, std::string& why);
  // How many files of() has read so far in this run (each once): what an attach read while
  // it held the process shows as a difference.
  static std::uint64_t files_read();

  const std::string& name() const { return name_; }
  // runtime = file + bias, for the process that maps the module with `m`.
  std::optional<LoadBias> bias(const Mapping& m) const;
  // The file's bytes at [at, at + out.size()); false unless they are all in one executable
  // segment.
  bool read(FileAddr at, std::span<std::uint8_t> out) const;
  const BranchIndex& branches() const { return branches_; }
  // The lowest landing pad in [lo, hi), if any.
  std::optional<LandingPad> landing_pad_in(FileAddr lo, FileAddr hi) const;
  // Why the landing pads of code overlapping [lo, hi) are unknown; empty when they are known.
  std::string unknown_pads_in(FileAddr lo, FileAddr hi) const;

  // Built from an open ELF file (`name` for messages). Error when it is not one.
  ModuleCode(int fd, std::string name);

 private:
  struct Segment {
    FileAddr vaddr;
    std::uint64_t offset = 0, filesz = 0;
    bool exec = false;
    std::vector<std::uint8_t> bytes;  // executable segments only
  };
  void index_branches(const std::string& build_id);
  std::string name_;
  std::vector<Segment> segments_;
  BranchIndex branches_;
  EhTables eh_;
};

}  // namespace probecost
