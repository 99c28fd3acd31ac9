#pragma once
// The per-CPU buffers that call-recording trampolines write entry and exit
// records into, and the reader that drains them from the tracer while the process runs. One
// memfd per process, mapped read-write by the tracee (anywhere: the trampolines load its address)
// and by the tracer.
//
// Writers are trampolines in any thread of the tracee. A record goes into the buffer of the CPU
// the thread runs on, inside a restartable sequence (rseq(2), glibc's registration): read the CPU
// number, the TSC and the buffer's head, write the record, store head + size (the commit). A
// preemption, migration or signal between the first read and the commit sends the thread back
// to the start (the kernel's rseq abort), so a CPU's buffer has one writer at a time, needs no
// locked instruction, and holds its records in TSC order.
//
// Each CPU's ring is split into sub-buffers, as LTTng's are. The reader copies out only the
// sub-buffers the writer has left (its head is past their end), so it never reads a line the
// writer is still filling; it reads a sub-buffer that has stayed partly filled for a flush
// interval (a CPU that writes slowly, or has stopped) up to the head, LTTng's switch timer. A
// writer about to start a sub-buffer checks that the reader is done with it; if not, it waits
// for the reader (blocking mode, LTTng-UST's --blocking-timeout): out of the restartable
// sequence, a FUTEX_WAIT on the CPU's consumed word for at most the header's wait bound, then
// it tries again. A wait that times out turns blocking off for every writer (the reader is gone
// or stuck: no thread waits twice for a dead reader), and the record is dropped and counted, as
// every record is when blocking is off (discard mode, LTTng's and perf's: the newest are lost).
// The reader turns blocking on again at each pass it makes. The writer's only look at the
// reader's line is that check, once per sub-buffer.
//
// The reader is woken, not polled: the writer that commits a sub-buffer's last record bumps the
// header's wake word (lock inc) and makes a FUTEX_WAKE on it, once per sub-buffer, out of the
// restartable sequence (a system call inside one is not allowed). The reader FUTEX_WAITs on the
// word with the flush interval as its timeout, for the sub-buffers left partly filled.
//
// Layout, in offsets from the start of the memfd:
//   0            BufferHeader, then in the same page:
//                  +256  wake: u32, bumped by each writer that fills a sub-buffer
//                  +320  blocking: u32, 1: a writer with no room waits; 0: it drops
//                  +384  the writers' wait bound, a struct timespec (FUTEX_WAIT's timeout)
//                  +448  sleeping: u32, 1 while the reader is in (or about to enter) its wait:
//                        a writer makes the FUTEX_WAKE only then (a shared futex's wake costs
//                        8-10 us on a KVM guest; a busy reader needs none)
//   ctl_offset   cpus + 1 control blocks of ctl_stride bytes (a power of two), the CPU's own:
//                  +0    head: bytes committed (the writer's line)
//                  +8    data: where this CPU's ring is, in the tracee
//                  +16   sync_at: where the CPU's last sync record is (below), +24 its thread
//                        pointer, +32 its tsc >> 24, +40 its sp >> 24 (the writers' own words)
//                  +64   consumed: bytes the reader is done with (the reader's line); its low
//                        32 bits are the futex word a writer waiting for room waits on
//                  +96   waiting: writers in that wait (lock inc / lock dec): the reader wakes
//                        them after it moves consumed
//                  +128  lost[id]: entry records dropped for want of room, by probe id; then,
//                        for call records, lost[max_ids + id]: exit records dropped (each
//                        trampoline's code knows which it writes: a call lost and a return
//                        lost are told apart without a look at the record)
//                the last block's lost words count records of threads without an rseq
//                registration (glibc.pthread.rseq=0, a thread made by a raw clone), which
//                have no CPU buffer: dropped, with a locked increment.
//   threads_offset  with stack snapshots only: the thread table (stack_record.hpp)
//   data_offset  cpus rings of `capacity` bytes
//
// A record is record_size bytes (16, 32 or 64: 16 with 0 or 1 argument) and never crosses a
// sub-buffer. Two kinds, told apart by bit 63 of the first word (format version 3; version 2
// gave every record {tsc, thread pointer, sp | id | exit, values}, 32 bytes at least):
//   a sync record, the first of each sub-buffer and wherever a writer finds that the last one
//   of its CPU's sub-buffer is not its own (another thread wrote since, or the tsc or the stack
//   left the 2^24 window below):
//     +0   bit 63 set; bits 40-62: sp >> 24; bits 0-39: tsc >> 24
//     +8   the thread pointer (%fs:0, glibc's TCB: the thread's fs_base)
//   an entry or an exit, of the thread, time window and stack window of the sync before it:
//     +0   bit 63 clear; bit 62: set for an exit; bits 48-61: the probe id; bits 24-47: the low
//          24 bits of sp, the address of the frame's return-address slot (%rsp at the function's
//          first instruction, and at its ret or tail jump); bits 0-23: the low 24 bits of tsc
//     +8   an entry: its first argument (rdi); an exit: rax
//     +16  an entry: its other arguments (rsi, rdx, rcx, r8, r9), as many as asked
// So a call costs 2 x 16 bytes (uftrace writes 16 per record), and a sync 16 more: once per
// sub-buffer, per thread switch on the CPU, per 2^24 TSC ticks (~6 ms) of a thread that calls
// seldom. The writer validates its CPU's sync words against the head (an aborted sync leaves
// sync_at equal to the head, or the words of a sync it did not commit; call_code.cpp).
// A buffer made with stack_bytes > 0 holds stack snapshots instead (stack_record.hpp): {tsc,
// thread pointer, sp | id << 48} as their first three words, then the registers and the stack
// bytes, in slots of record_size bytes.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace probecost::jump {

inline constexpr char kCallBufferMagic[8] = {'p', 'r', 'o', 'b', 'e', 'c', 'a', 'l'};
inline constexpr std::uint32_t kCallBufferVersion = 4;  // 4: exits lost counted apart
// The memfd's name: /proc/PID/maps shows "/memfd:probecost-calls (deleted)".
inline constexpr char kCallBufferName[] = "probecost-calls";
inline constexpr int kMaxCallArgs = 6;
inline constexpr std::uint32_t kMaxCallIds = 1u << 15;

inline constexpr std::uint32_t kHeadOffset = 0;
inline constexpr std::uint32_t kDataPointerOffset = 8;
inline constexpr std::uint32_t kSyncAtOffset = 16;
inline constexpr std::uint32_t kSyncTpOffset = 24;
inline constexpr std::uint32_t kSyncTscOffset = 32;
inline constexpr std::uint32_t kSyncSpOffset = 40;
inline constexpr std::uint32_t kConsumedOffset = 64;
inline constexpr std::uint32_t kWaitingOffset = 96;
inline constexpr std::uint32_t kLostOffset = 128;
inline constexpr std::uint32_t kWakeOffset = 256;
inline constexpr std::uint32_t kBlockingOffset = 320;
inline constexpr std::uint32_t kWaitBoundOffset = 384;
inline constexpr std::uint32_t kSleepingOffset = 448;
// Where the probe id is, in a call record's first word and a snapshot's third (bits 0-47 its sp).
inline constexpr int kIdShift = 48;
inline constexpr std::uint64_t kSpMask = (1ull << kIdShift) - 1;
// Call records (format 3): the split of tsc and sp between a sync and the events after it.
inline constexpr int kWindowBits = 24;
inline constexpr std::uint64_t kWindowMask = (1ull << kWindowBits) - 1;
inline constexpr std::uint64_t kSyncBit = 1ull << 63;
inline constexpr std::uint64_t kEventExitBit = 1ull << 62;
inline constexpr int kSyncSpShift = 40;
inline constexpr std::uint32_t kMaxRecordIds = 1u << 14;  // an event's 14 bits of id

// Bytes per call record for `args` arguments (0 to 6): 16, 32 or 64.
std::uint32_t call_record_size(int args);

struct CallBufferConfig {
  std::uint32_t cpus = 1;            // possible CPUs of the tracee (cpu_id < cpus)
  std::uint64_t capacity = 4 << 20;  // bytes per CPU: a power of two
  std::uint32_t subbuffers = 16;     // per CPU: a power of two, at least 2
  int args = 0;                      // arguments per entry record, 0 to 6
  std::uint32_t max_ids = 64;        // probe ids 0 .. max_ids - 1
  // Stack snapshots of up to this many bytes instead of call records (0: call records).
  std::uint32_t stack_bytes = 0;
};

struct CallBufferLayout {
  std::uint32_t cpus = 0, record_size = 0, max_ids = 0, ctl_shift = 0, stack_bytes = 0;
  int args = 0;
  std::uint64_t capacity = 0, subbuffer = 0;
  std::uint64_t ctl_offset = 0, threads_offset = 0, data_offset = 0, size = 0;
  std::uint64_t ctl_stride() const { return std::uint64_t{1} << ctl_shift; }
  // Where a control block counts probe `id`'s dropped records: its entries' (stack snapshots
  // too), or its exits'.
  std::uint64_t lost_offset(std::uint32_t id, bool exit) const {
    return kLostOffset + 8ull * (exit ? max_ids + id : id);
  }
  // Error for a config out of bounds (sizes not powers of two, too many ids or arguments).
  static CallBufferLayout of(const CallBufferConfig& config);
};

struct BufferHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_size;
  std::uint32_t cpus, record_size, max_ids, ctl_shift;
  std::uint64_t capacity, subbuffer, ctl_offset, data_offset, size;
  std::uint64_t tracee_address;  // where the tracee maps the buffer
  std::int32_t args;
  std::uint32_t stack_bytes;  // 0: call records; else stack snapshots (stack_record.hpp)
};

// One decoded record.
struct CallRecord {
  std::uint64_t tsc = 0;
  std::uint64_t tp = 0;  // the writing thread's thread pointer
  std::uint64_t sp = 0;
  std::uint32_t id = 0;
  bool exit = false;
  std::array<std::uint64_t, kMaxCallArgs> values{};  // entry: the arguments; exit: [0] = rax
};

// One CPU's call records, decoded in the order they were written: a sync sets what the events
// after it lean on. The tracee wrote every byte: nothing decoded is trusted beyond its bits.
class CallDecoder {
 public:
  explicit CallDecoder(int args) : args_(args) {}
  // The record at `bytes`: true with `out` set for an entry or exit; false for a sync, or an
  // event with no sync before it (counted: no writer of ours leaves one).
  bool next(const std::uint8_t* bytes, CallRecord& out);
  std::uint64_t orphans() const { return orphans_; }

 private:
  int args_;
  bool synced_ = false;
  std::uint64_t tp_ = 0, tsc_hi_ = 0, sp_hi_ = 0, orphans_ = 0;
};

// The probe id of the call record at `bytes`, or -1 for a sync.
std::int64_t call_record_id(const std::uint8_t* bytes);

// Formats a buffer through the tracer's mapping (zero-filled, as a fresh memfd is): the header
// and each CPU's data pointer, for a tracee that maps it at `tracee_at`.
void format_call_buffer(std::span<std::uint8_t> view, std::uint64_t tracee_at,
                        const CallBufferLayout& layout);

// The tracer's side: copies out what the writers have finished, frees it for them, and hands
// the records over in TSC order up to a horizon below which no record can still arrive; or,
// with a sink, hands the sink each finished range where it lies in the mapping (the drain
// writes it out as it is) and frees it once the sink returns.
class CallReader {
 public:
  // One CPU's records [data, data + bytes), whole records, in TSC order, in the tracer's
  // mapping (the tracee can still write them: trust nothing in them).
  using Sink = std::function<void(std::uint32_t cpu, const std::uint8_t* data, std::size_t bytes)>;
  struct Options {
    // A sub-buffer left partly filled this long is read up to the head (TSC ticks).
    std::uint64_t flush_ticks = 0;
    // How long a record's writer may take between its TSC read and its commit (a thread held
    // off its CPU by the hypervisor, say): records of a CPU read up to its head are final only
    // this far back (TSC ticks).
    std::uint64_t commit_slack = 0;
  };
  // `view`: the tracer's mapping, formatted; `start_tsc`: before any trampoline could write.
  CallReader(std::span<std::uint8_t> view, const CallBufferLayout& layout, std::uint64_t start_tsc,
             const Options& options);

  // One pass over the CPUs at reader time `now` (TSC, taken before the call). `final`: no
  // writer is left (the threads are stopped or gone): everything up to each head is read.
  void poll(std::uint64_t now, bool final = false);
  // The same with a sink instead of copies (take() then has nothing). Returns the bytes read.
  std::uint64_t poll(std::uint64_t now, bool final, const Sink& sink);

  // The wake word's value: wait_for_writers(seen) returns at once if a writer has bumped it
  // since. Waits at most `timeout_ns` (FUTEX_WAIT: EINTR and EAGAIN return too).
  std::uint32_t wake_word() const;
  void wait_for_writers(std::uint32_t seen, long timeout_ns) const;
  // Makes a wait_for_writers() in another thread return.
  void wake_reader();
  // Blocking mode on (writers with no room wait at most `bound_ns`) or off (they drop).
  void set_blocking(bool on, long bound_ns = 0);
  bool blocking() const;
  // Every record read so far with a TSC below the horizon (all of them when the last poll was
  // final), oldest first, appended to `out`.
  void take(std::vector<CallRecord>& out);
  // No record not yet taken has a TSC below this; UINT64_MAX when the last poll was final.
  std::uint64_t horizon() const;

  std::uint64_t records_read() const { return read_; }
  // Records dropped so far: for want of room, and by threads without rseq. lost(): entries and
  // exits; lost(id, exit): one kind. The tracee writes the counts: sums wrap, nothing more.
  std::uint64_t lost(std::uint32_t id) const;
  std::uint64_t lost(std::uint32_t id, bool exit) const;
  std::uint64_t lost_total() const;
  const CallBufferLayout& layout() const { return layout_; }

 private:
  struct Cpu {
    std::uint64_t cursor = 0;       // bytes read
    std::uint64_t watermark = 0;    // no unread record of this CPU is older
    std::uint64_t partial_sub = 0;  // the sub-buffer last seen partly filled, + 1 (0: none)
    std::uint64_t partial_since = 0;
    // Records copied out and not taken yet, as the writers wrote them, in TSC order: copying
    // is what frees the buffer for the writers, and it is a memcpy.
    std::vector<std::uint8_t> copied;
    std::size_t taken = 0;               // bytes of `copied` taken
    CallDecoder at_end{0}, at_taken{0};  // decoding `copied` at its end, and at `taken`
    std::optional<CallRecord> next;      // decoded at `taken`, not taken yet
    const CallRecord* peek(std::uint32_t record_size);
  };
  std::uint8_t* ctl(std::uint32_t cpu) const;
  std::uint64_t readable_end(Cpu& c, std::uint64_t head, std::uint64_t now, bool final);
  void read_range(std::uint32_t cpu, Cpu& c, std::uint64_t end, const Sink* sink);
  std::uint64_t poll_cpus(std::uint64_t now, bool final, const Sink* sink);
  std::uint8_t* header_word(std::uint32_t offset) const { return view_.data() + offset; }

  std::span<std::uint8_t> view_;
  CallBufferLayout layout_;
  Options options_;
  std::vector<Cpu> cpus_;
  std::uint64_t read_ = 0;
  bool final_ = false;
};

}  // namespace probecost::jump
