#pragma once
// The area of int3 probes in a tracee: where probecost records every int3 it writes, and where
// the SIGTRAP handler that stands in for a dead probecost lives.
//
// One anonymous mapping, read-exec (read-only when the process may not map executable
// memory); the tracer writes it through /proc/PID/mem. It describes itself, as the jump area
// does, so that `probecost restore -p PID` finds it after probecost was SIGKILLed:
//   0            TrapHeader, then TrapRecord[record_capacity]
//   code_offset  the SIGTRAP handler and its restorer (trap_handler.hpp); none: code_size 0
//   copies_offset  slots for the copies of displaced instructions the handler resumes at
//
// A record is complete before its site's int3 is written, and record_count is raised after it:
// the handler (running in any thread, at any time) and restore see only whole records. A
// record whose int3 is removed gets state kRemoved; a detach marks them all.
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/x86/decoder.hpp"
#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost::trap {

inline constexpr char kMagic[8] = {'p', 'r', 'o', 'b', 'e', 'i', 'n', 't'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint64_t kPage = 4096;

// struct kernel_sigaction of x86-64 rt_sigaction (8-byte sigset).
struct KernelSigaction {
  std::uint64_t handler;
  std::uint64_t flags;
  std::uint64_t restorer;
  std::uint64_t mask;
};
static_assert(sizeof(KernelSigaction) == 32);
// The kernel's SA_RESTORER (glibc's headers do not export it): sa_restorer is set.
inline constexpr std::uint64_t kSaRestorer = 0x04000000;

// Whether our handler is the process's SIGTRAP disposition.
enum class HandlerState : std::uint32_t {
  None = 0,       // no handler in this area (no code, or never installed)
  Installed = 1,  // installed over `program` (the program's own disposition)
  PutBack = 2,    // the program's disposition is back (or was changed by the program since)
};

struct TrapHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_size;  // sizeof(TrapHeader)
  std::uint64_t area_address;
  std::uint64_t area_size;
  std::int32_t tracer_pid;
  std::uint32_t record_size;  // sizeof(TrapRecord)
  std::uint32_t record_capacity;
  std::uint32_t record_count;  // raised after the record it adds is complete
  std::uint64_t records_offset;
  std::uint64_t code_offset, code_size;
  std::uint64_t handler;   // our handler's address in the area (0: no code)
  std::uint64_t restorer;  // its sa_restorer (rt_sigreturn)
  std::uint64_t checksum;  // FNV-1a of the fields above, with record_count zero
  // Below: written as the handler is installed and put back.
  KernelSigaction program;  // the program's SIGTRAP disposition we chain to
  KernelSigaction ours;     // what we installed
  KernelSigaction dfl;      // all zero: SIG_DFL, for the handler's rt_sigaction
  std::uint32_t handler_state;
  std::uint32_t pad;
};
static_assert(sizeof(TrapHeader) == 200);

inline constexpr std::uint8_t kRemoved = 0;
inline constexpr std::uint8_t kInstalled = 1;

struct TrapRecord {
  std::uint64_t site;
  // Where the handler sends a thread that trapped on the site: a copy of the displaced
  // instruction that goes on to the code after it (0: no copy, the handler cannot help).
  std::uint64_t resume;
  // Where a thread may be that the tracer had moved past the site when it died, with the
  // SIGTRAP of its hit still pending: the tracer's own copy, the next instruction, the
  // instruction's branch target (0: none). Its trap is spent: the handler lets it go on.
  std::uint64_t moved[3];
  // The mapping the site was in: device and inode of its file, and the site's file offset.
  std::uint64_t dev;
  std::uint64_t inode;
  std::uint64_t offset;
  std::uint8_t state;     // kInstalled, kRemoved
  std::uint8_t original;  // the byte the int3 displaced
  std::uint8_t patched;   // what probecost wrote: 0xCC
  std::uint8_t length;    // of the displaced instruction
  std::uint32_t pad;
  std::uint64_t pad2;
};
static_assert(sizeof(TrapRecord) == 80);

struct FileIdentity {
  std::uint64_t dev = 0, inode = 0, offset = 0;
  bool operator==(const FileIdentity&) const = default;
};

// One int3 site as recorded.
struct SiteRecord {
  RuntimeAddr site;
  RuntimeAddr resume;
  std::array<std::uint64_t, 3> moved{};
  FileIdentity file;
  std::uint8_t original = 0;
  std::uint8_t patched = 0xCC;
  std::uint8_t length = 0;
  bool installed = true;
  std::uint32_t index = 0;  // in its area's table (parse_area)
};

inline constexpr std::uint64_t kCopySlot = 32;  // as the outline step-over's slots

struct Layout {
  std::uint32_t record_capacity = 0;
  std::uint64_t records_offset = 0, code_offset = 0, code_size = 0;
  std::uint64_t copies_offset = 0, copies_size = 0, size = 0;
  // `code`: whether the area holds the handler and `copies` slots for copies (it needs an
  // executable mapping then).
  static Layout of(std::uint32_t records, bool code, std::uint32_t copies = 0);
};

// A system call the area's code makes: its number, and where its syscall instruction is.
struct CodeCall {
  long nr;
  RuntimeAddr at;
};

// Writes an area through the tracer's access to tracee memory.
class AreaWriter {
 public:
  // Writes the header of a fresh (zero) area at `at`, and the handler's code if the layout
  // has room for it.
  AreaWriter(TraceeMemory& memory, RuntimeAddr at, const Layout& layout, pid_t tracer_pid);
  // The same area as seen in another address space that holds a copy of it (a fork child's),
  // written through `memory`.
  AreaWriter copy_for(TraceeMemory& memory) const {
    AreaWriter w(*this);
    w.memory_ = &memory;
    return w;
  }
  // Writes the handler's copy of `in` (resume_copy()) into a free slot of the area; nothing,
  // with `why`, when the slots are full, the site is out of the area's reach, or the
  // instruction has no copy.
  std::optional<RuntimeAddr> place_copy(const Instruction& in, std::string& why);
  // Appends a record; false when the area is full.
  bool add(const SiteRecord& record);
  // Sets moved[`i`] of the record of `site`.
  void set_moved(RuntimeAddr site, std::size_t i, RuntimeAddr to);
  // Sets the resume address of the record of `site`, if it has none.
  void set_resume_if_none(RuntimeAddr site, RuntimeAddr to);
  // Marks the record of `site` removed (its int3 is gone); false if there is none.
  bool remove(RuntimeAddr site);
  // Every record removed: nothing of ours is left in the text.
  void remove_all();
  // The handler as it is to be installed, over `program`; and after it is put back.
  void set_dispositions(const KernelSigaction& program, const KernelSigaction& ours);
  void set_state(HandlerState s);

  RuntimeAddr address() const { return at_; }
  RuntimeAddr handler() const;
  RuntimeAddr restorer() const;
  RuntimeAddr code() const { return at_ + static_cast<std::int64_t>(layout_.code_offset); }
  RuntimeAddr dfl() const;
  // The system calls of the handler (empty without code): for the seccomp check.
  const std::vector<CodeCall>& calls() const { return calls_; }
  const Layout& layout() const { return layout_; }
  std::uint32_t count() const { return count_; }
  bool full() const { return count_ >= layout_.record_capacity; }

 private:
  AreaWriter(TraceeMemory& memory, RuntimeAddr at, const Layout& layout)
      : memory_(&memory), at_(at), layout_(layout) {}
  RuntimeAddr record_at(std::uint32_t i) const;
  template <typename T>
  void put(std::uint64_t offset, const T& value);

  TraceeMemory* memory_;
  RuntimeAddr at_;
  Layout layout_;
  std::uint32_t count_ = 0;
  std::uint64_t copies_used_ = 0;
  std::uint64_t handler_offset_ = 0, restorer_offset_ = 0;
  std::vector<CodeCall> calls_;
  std::vector<RuntimeAddr> sites_;  // by record index
  std::vector<bool> resumes_;       // by record index: it has a resume address
};

struct ParsedArea {
  RuntimeAddr address;
  std::uint64_t size = 0;
  std::uint64_t records_offset = 0;
  pid_t tracer_pid = 0;
  RuntimeAddr handler;
  HandlerState state = HandlerState::None;
  KernelSigaction program{}, ours{};
  std::vector<SiteRecord> records;
};

// Reads an area from a copy of its first bytes (the header and records are enough).
// `mapped_at`: where the mapping that held them starts. Checks every field and bound before
// trusting it; nothing, with `why`, if anything is off.
std::optional<ParsedArea> parse_area(std::span<const std::uint8_t> bytes, RuntimeAddr mapped_at,
                                     std::string& why);
// Where the state byte of record `r` of `area` is in the tracee (to mark it removed).
RuntimeAddr state_byte(const ParsedArea& area, const SiteRecord& r);

}  // namespace probecost::trap
