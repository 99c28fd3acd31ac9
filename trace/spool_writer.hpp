#pragma once
// How the record spool's bytes reach its file (CallSpool, call_drain.hpp).
//
// Buffered, write(2) copies each byte into the page cache: on a KVM/PVM guest each new page of
// the page cache can be a page the host has to back again (the guest reports free memory to
// it), and that copy was 2 to 25 ns of the drain's CPU per 16-byte record into ext4 (docs/
// record.md). With O_DIRECT the file system reads whole pages straight from the caller's memory
// (the shared mapping of the rings): no page cache, no copy by the CPU, but the write returns
// once the device has the bytes, so the drain waits for the disk.
//
// So a piece that holds a whole page is placed in the file where its address and its offset
// agree modulo a page (a page of the ring is a page of the file), and its whole pages go with
// O_DIRECT, the bytes before the first and after the last with write(2) into the page cache
// (a page is only ever written one way). A file system that states no direct I/O alignment a
// page satisfies (statx's STATX_DIOALIGN: tmpfs states none), or refuses a direct write that a
// buffered one then gets through, gets buffered writes from there on. The bytes in the file are the
// same either way.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/fd.hpp"

namespace probecost::trace_run {

enum class SpoolIo { Buffered, Direct };
// PROBECOST_SPOOL_IO=buffered or direct (the default). Error for anything else.
SpoolIo spool_io_from_env();

class SpoolWriter {
 public:
  static constexpr std::uint64_t kPage = 4096;
  // `fd`: the spool, read-write. With Direct, the file is opened again with O_DIRECT (through
  // /proc/self/fd) where its file system allows it.
  SpoolWriter(Fd fd, SpoolIo io);
  // With `direct` as the file opened with O_DIRECT (tests give one that refuses writes).
  SpoolWriter(Fd fd, Fd direct);

  // Where `bytes` at `data` go in a file now `size` long: at `size`, or, when they hold a
  // whole page, at the first offset from `size` on that is congruent to `data` modulo a page
  // (the gap, less than a page, is a hole that reads as zeros).
  static std::uint64_t place(const void* data, std::size_t bytes, std::uint64_t size);
  // Writes `bytes` at offset `at`. False, with the reason in `why`, when the file system
  // refuses them (a full disk, a quota).
  bool write(const std::uint8_t* data, std::size_t bytes, std::uint64_t at, std::string& why);

  int fd() const { return fd_.get(); }
  bool direct() const { return static_cast<bool>(direct_); }
  std::uint64_t direct_bytes() const { return direct_bytes_; }
  // How the bytes go: "O_DIRECT", "buffered", or why O_DIRECT is not used.
  const std::string& how() const { return how_; }

 private:
  bool buffered(const std::uint8_t* data, std::size_t bytes, std::uint64_t at, std::string& why);
  bool direct(const std::uint8_t* data, std::size_t bytes, std::uint64_t at, std::string& why);

  Fd fd_, direct_;
  std::string how_;
  std::uint64_t direct_bytes_ = 0;
};

}  // namespace probecost::trace_run
