#pragma once
// The table of USDT semaphores probecost raised in a tracee (tracer/core/semaphores.hpp): what
// `probecost restore -p PID` lowers after probecost *and* its guardian were killed.
//
// One page of anonymous memory, read-only in the tracee; the tracer writes it through
// /proc/PID/mem. Private, so a fork child's copy holds the records of the raises its copy of
// the semaphores holds. It describes itself as the jump and trap areas do (area_format.hpp):
//   0   TableHeader, then TableRecord[capacity]
//
// A record's state is the witness of its raise: written kRaised only after the raise (a death
// between the two leaves the count one too high, never lowered by restore), and kLowered (or
// kForgotten: its library went) before the lowering (a death between leaves it one too high,
// never lowered twice). The tracee can write anything here: a reader trusts no field before it
// is checked, and lowers a semaphore only where the mapping is still the file's data it was
// raised in, the probe's site still holds our bytes, and it is not zero.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "breakpoint/x86/tracee_memory.hpp"

namespace probecost::sema {

inline constexpr char kMagic[8] = {'p', 'r', 'o', 'b', 'e', 's', 'e', 'm'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint64_t kTableSize = 4096;

struct TableHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_size;  // sizeof(TableHeader)
  std::uint64_t area_address;
  std::uint64_t area_size;
  std::int32_t tracer_pid;
  std::uint32_t record_size;  // sizeof(TableRecord)
  std::uint32_t capacity;
  std::uint32_t count;     // raised after the record it adds is complete
  std::uint64_t checksum;  // FNV-1a of the fields above, with count zero
};
static_assert(sizeof(TableHeader) == 56);

inline constexpr std::uint8_t kEmpty = 0;  // a slot a fork child's copy never got
inline constexpr std::uint8_t kRaised = 1;
inline constexpr std::uint8_t kLowered = 2;
inline constexpr std::uint8_t kForgotten = 3;  // its library went (dlclose): nothing to lower

struct TableRecord {
  std::uint64_t address;  // the semaphore (an unsigned short)
  std::uint64_t witness;  // the probe's site, written just before the raise
  // The mapping the semaphore was in: device and inode of its file, and its file offset.
  std::uint64_t dev, inode, offset;
  std::uint8_t state;
  std::uint8_t pad[7];
};
static_assert(sizeof(TableRecord) == 48);

inline constexpr std::uint32_t kCapacity =
    static_cast<std::uint32_t>((kTableSize - sizeof(TableHeader)) / sizeof(TableRecord));

struct Raise {
  RuntimeAddr address;
  RuntimeAddr witness;
  trap::FileIdentity file;
  std::uint8_t state = kRaised;
  RuntimeAddr state_at;  // where its state byte is in the tracee
};

// Writes a table through the tracer's access to tracee memory.
class TableWriter {
 public:
  // Writes the header of a fresh (zero) table of kTableSize bytes at `at`.
  TableWriter(TraceeMemory& memory, RuntimeAddr at, pid_t tracer_pid);
  // The same table in another address space that holds a copy of it (a fork child's).
  TableWriter copy_for(TraceeMemory& memory) const {
    TableWriter w(*this);
    w.memory_ = &memory;
    return w;
  }
  // Appends a record in state kRaised: its state byte's address, or nothing when full.
  std::optional<RuntimeAddr> add(RuntimeAddr semaphore, RuntimeAddr witness,
                                 const trap::FileIdentity& file);
  void set_state(RuntimeAddr state_at, std::uint8_t state) { memory_->write_byte(state_at, state); }
  RuntimeAddr address() const { return at_; }

 private:
  TraceeMemory* memory_;
  RuntimeAddr at_;
  std::uint32_t count_ = 0;
};

struct ParsedTable {
  RuntimeAddr address;
  std::uint64_t size = 0;
  pid_t tracer_pid = 0;
  std::vector<Raise> records;  // kEmpty slots left out
};

// Reads a table from a copy of its bytes. `mapped_at`: where the mapping that held them starts.
// Checks every field and bound before trusting it; nothing, with `why`, if anything is off.
std::optional<ParsedTable> parse_table(std::span<const std::uint8_t> bytes, RuntimeAddr mapped_at,
                                       std::string& why);

}  // namespace probecost::sema
