#include "trace/spool_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"

namespace probecost::trace_run {

SpoolIo spool_io_from_env() {
  const char* e = std::getenv("PROBECOST_SPOOL_IO");
  if (!e || !*e || std::strcmp(e, "direct") == 0) return SpoolIo::Direct;
  if (std::strcmp(e, "buffered") == 0) return SpoolIo::Buffered;
  throw Error(std::string("PROBECOST_SPOOL_IO is \"") + e + "\": buffered or direct");
}

namespace {

// The file opened again with O_DIRECT, or why not. A file system that does direct I/O states
// its alignments (statx, Linux 6.1); tmpfs accepts O_DIRECT at open but states none, and copies
// into its pages anyway, so it is left buffered.
Fd open_direct(int fd, std::string& how) {
  struct statx st {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) != 0 || !(st.stx_mask & STATX_DIOALIGN) ||
      !st.stx_dio_mem_align || !st.stx_dio_offset_align) {
    how = "buffered (the file system states no direct I/O)";
    return Fd();
  }
  if (SpoolWriter::kPage % st.stx_dio_mem_align || SpoolWriter::kPage % st.stx_dio_offset_align) {
    how = "buffered (direct I/O wants more than a page's alignment)";
    return Fd();
  }
  // The spool is an unlinked file: /proc/self/fd opens its inode again, with a file status of
  // its own (O_DIRECT is per open file, not per inode).
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  Fd d(::open(self.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
  how = d ? "O_DIRECT" : std::string("buffered (O_DIRECT: ") + std::strerror(errno) + ")";
  return d;
}

}  // namespace

SpoolWriter::SpoolWriter(Fd fd, SpoolIo io) : fd_(std::move(fd)), how_("buffered") {
  if (io == SpoolIo::Direct) direct_ = open_direct(fd_.get(), how_);
}

SpoolWriter::SpoolWriter(Fd fd, Fd direct)
    : fd_(std::move(fd)), direct_(std::move(direct)), how_(direct_ ? "O_DIRECT" : "buffered") {}

std::uint64_t SpoolWriter::place(const void* data, std::size_t bytes, std::uint64_t size) {
  auto addr = reinterpret_cast<std::uintptr_t>(data);
  std::uint64_t first = (addr + kPage - 1) & ~(kPage - 1);
  if (first + kPage > addr + bytes) return size;  // no whole page
  return size + ((addr - size) & (kPage - 1));
}

bool SpoolWriter::buffered(const std::uint8_t* data, std::size_t bytes, std::uint64_t at,
                           std::string& why) {
  while (bytes) {
    ssize_t n = ::pwrite(fd_.get(), data, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      why = n < 0 ? std::strerror(errno) : "no progress";
      return false;
    }
    data += n;
    at += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

// Whole pages, page-aligned in memory and in the file. A write that fails (EINVAL: an
// alignment or a mode the file system did not state; ENOSPC) is made again buffered: if that
// goes through, O_DIRECT is off from there on; if not, its reason is the spool's error. A short
// one (a disk nearly full) ends buffered, which says why.
bool SpoolWriter::direct(const std::uint8_t* data, std::size_t bytes, std::uint64_t at,
                         std::string& why) {
  while (bytes && direct_) {
    ssize_t n = ::pwrite(direct_.get(), data, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string refused = n < 0 ? std::strerror(errno) : "no progress";
      if (!buffered(data, bytes, at, why)) return false;
      how_ = "buffered (O_DIRECT refused a write: " + refused + ")";
      direct_ = Fd();
      return true;
    }
    direct_bytes_ += static_cast<std::uint64_t>(n);
    data += n;
    at += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
    if (bytes % kPage) break;
  }
  return buffered(data, bytes, at, why);
}

bool SpoolWriter::write(const std::uint8_t* data, std::size_t bytes, std::uint64_t at,
                        std::string& why) {
  auto addr = reinterpret_cast<std::uintptr_t>(data);
  if (!direct_ || (addr - at) % kPage) return buffered(data, bytes, at, why);
  std::size_t head = std::min<std::size_t>(bytes, (kPage - addr % kPage) % kPage);
  std::size_t whole = (bytes - head) & ~(kPage - 1);
  if (!whole) return buffered(data, bytes, at, why);
  std::size_t tail = head + whole;
  return buffered(data, head, at, why) && direct(data + head, whole, at + head, why) &&
         buffered(data + tail, bytes - tail, at + tail, why);
}

}  // namespace probecost::trace_run
