#pragma once
// The shared area of jump-patched probes: one memfd, mapped by the tracer (to write trampolines,
// read hit counters, drain events) and by the tracee within +-2 GiB of the sites it serves (where
// the trampolines run and write). It describes itself, with a magic and a version, so that
// `probecost restore -p PID` can find it in the tracee of a dead tracer and put every original
// byte back.
//
// Layout, in offsets from the area's start; each region starts on a page so that the tracee's
// mapping can give each its own protection:
//   0             AreaHeader, then SiteEntry[site_capacity]  tracee: read-write (hit counters)
//   code_offset   the trampolines                            tracee: read-exec
//   counters_offset  site_capacity rows of `cpus` per-CPU counters, 64 bytes apart (none: 0)
//                                                            tracee: read-write
//   rings_offset  ring_count rings of ring_capacity records  tracee: read-write (none: 0)
// A site with events owns one ring; its hit counter is that ring's position counter. A site that
// counts per CPU (rseq) owns a row of counters; its hits are the row's sum plus its hit counter.
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/event_ring.hpp"
#include "breakpoint/in_tracee/trampoline.hpp"
#include "breakpoint/jump/patch_site.hpp"

namespace probecost::jump {

inline constexpr char kAreaMagic[8] = {'p', 'r', 'o', 'b', 'e', 'j', 'm', 'p'};
inline constexpr std::uint32_t kAreaVersion = 1;
// The memfd's name: /proc/PID/maps shows "/memfd:probecost-jump (deleted)".
inline constexpr char kAreaName[] = "probecost-jump";
inline constexpr std::uint64_t kAreaPage = 4096;

struct AreaHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_size;      // sizeof(AreaHeader)
  std::uint64_t area_address;     // where the tracee maps the area
  std::uint64_t area_size;        // bytes
  std::int32_t tracer_pid;        // who patched (restore checks it is gone)
  std::uint32_t site_entry_size;  // sizeof(SiteEntry)
  std::uint32_t site_capacity;
  std::uint32_t site_count;  // entries in use; raised after the entry it adds is complete
  std::uint64_t sites_offset;
  std::uint64_t code_offset, code_size;
  std::uint64_t rings_offset, rings_size;  // 0, 0: no rings
  std::uint64_t ring_capacity;             // records per ring
  std::uint64_t ring_stride;               // bytes from one ring to the next
  std::uint32_t ring_count;
  std::uint32_t cpus;      // per-CPU counters per site; 0: none
  std::uint64_t checksum;  // FNV-1a of this header with checksum and site_count zero
  std::uint64_t counters_offset;
};
static_assert(sizeof(AreaHeader) == 128);

inline constexpr std::uint8_t kSiteEvents = 1;          // the trampoline writes records
inline constexpr std::uint8_t kSitePreservesFlags = 2;  // it saves the status flags
inline constexpr std::uint8_t kSitePerCpu = 4;          // it counts per CPU (rseq)
inline constexpr std::uint8_t kSiteCalls = 8;           // it writes call records (rseq)

struct alignas(64) SiteEntry {
  std::uint64_t address;      // the patched site, in the tracee
  std::uint64_t trampoline;   // its trampoline, in the tracee
  std::uint64_t hits;         // +1 at every hit (lock inc, or with events lock xadd); 0 for
                              // call records, counted in their buffer
  std::uint32_t id;           // the probe's id in event records
  std::uint8_t length;        // bytes patched: 5..16
  std::uint8_t flags;         // kSiteEvents | kSitePreservesFlags
  std::uint16_t ring;         // with kSiteEvents: the index of its ring
  std::uint8_t original[16];  // the bytes the jump replaced
  std::uint8_t patch[16];     // the jump and its int3 padding, as written
};
static_assert(sizeof(SiteEntry) == 64);

struct AreaConfig {
  std::uint32_t max_sites = 64;
  std::uint64_t code_bytes = 16384;
  std::uint32_t event_sites = 0;    // sites that may have events: one ring each
  std::uint64_t ring_capacity = 0;  // records per ring; a power of two up to 2^31
  // Counting per CPU with rseq instead of lock inc (see PerCpuCounter): the tracee's number of
  // possible CPUs and glibc's __rseq_offset; 0 CPUs: lock inc.
  std::uint32_t cpus = 0;
  std::int32_t rseq_offset = 0;
};

struct AreaLayout {
  std::uint32_t site_capacity = 0, ring_count = 0, cpus = 0;
  std::int32_t rseq_offset = 0;
  std::uint64_t ring_capacity = 0, ring_stride = 0;
  std::uint64_t sites_offset = 0, code_offset = 0, code_size = 0, counters_offset = 0,
                counters_size = 0, rings_offset = 0, rings_size = 0;
  std::uint64_t size = 0;  // of the whole area: the memfd's size
  // Error if there are rings and their capacity is not a power of two up to 2^31.
  static AreaLayout of(const AreaConfig& config);
};

struct SiteOptions {
  std::uint32_t id = 0;  // in its event records
  bool events = false;   // write a record per hit (needs a free ring)
  FlagSave flag_save = FlagSave::Lahf;
  // Call records (entry, exit or both, by the plan's role) instead of counting or events.
  std::optional<CallRecordTarget> calls;
  // With `calls`: a stack snapshot into this buffer (stack_bytes > 0) before each entry record.
  std::optional<CallRecordTarget> stacks;
};

struct PlacedSite {
  std::size_t index = 0;  // in the site table
  Trampoline trampoline;
  JumpPatch patch;  // for a PatchSite
};

// Builds an area through the tracer's writable mapping of it. Addresses it hands out are the
// tracee's.
class AreaWriter {
 public:
  // `view`: the tracer's mapping (layout.size bytes, zero-filled as a fresh memfd is);
  // `tracee_at`: where the tracee maps the same pages. Writes the header and the ring's.
  AreaWriter(std::span<std::uint8_t> view, RuntimeAddr tracee_at, const AreaLayout& layout,
             pid_t tracer_pid);

  // Adds a site to the table and writes its trampoline; nothing, with `why`, when the site is out
  // of reach of the area, the area is full, or the displaced instructions cannot be relocated.
  // Error, with nothing written, if the plan cannot become bytes (why_malformed()).
  std::optional<PlacedSite> add_site(const JumpPlan& plan, const SiteOptions& options,
                                     std::string& why);
  // Every hit of the site so far: its hit counter, plus its per-CPU counters if it has them.
  std::uint64_t hits(std::size_t index) const;
  // The events ring of a site as the tracer reads it (Error if the site has none).
  RingView ring(std::size_t index) const;
  RuntimeAddr tracee_address() const { return at_; }
  const AreaLayout& layout() const { return layout_; }

 private:
  AreaHeader& header() const { return *reinterpret_cast<AreaHeader*>(view_.data()); }
  SiteEntry& entry(std::size_t i) const;
  RuntimeAddr tracee(std::uint64_t offset) const { return at_ + static_cast<std::int64_t>(offset); }
  std::uint64_t counter_row(std::size_t index) const {
    return layout_.counters_offset + index * layout_.cpus * 64;
  }
  std::optional<Trampoline> place_code(const JumpPlan& plan, const TrampolineSpec& spec,
                                       std::string& why);

  std::span<std::uint8_t> view_;
  RuntimeAddr at_;
  AreaLayout layout_;
  std::uint64_t code_used_ = 0;
  std::uint32_t rings_used_ = 0;
};

struct ParsedSite {
  JumpPatch patch;
  std::uint64_t hits = 0;
  std::uint32_t id = 0;
  std::uint8_t flags = 0;
  std::uint16_t ring = 0;
};

struct ParsedArea {
  RuntimeAddr address;
  std::uint64_t size = 0;
  pid_t tracer_pid = 0;
  std::vector<ParsedSite> sites;
};

// Reads an area from a copy of its bytes (they may stop after the site table: the code and the
// ring are not needed; a site that counts per CPU has its hits whole when they reach its row of
// counters). `mapped_at`: where the mapping that held them starts in the tracee.
// Checks every field and bound before trusting it; nothing, with `why`, if anything is off.
std::optional<ParsedArea> parse_area(std::span<const std::uint8_t> bytes, RuntimeAddr mapped_at,
                                     std::string& why);

}  // namespace probecost::jump
