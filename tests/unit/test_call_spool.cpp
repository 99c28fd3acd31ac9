// record's drain spools the rings' bytes with O_DIRECT where the file system takes it, whole
// pages straight from the mapping, and buffered otherwise (trace/spool_writer.hpp): the file
// is the same byte for byte either way, every piece reads back where its chunk says, the file
// ends where its last piece ends, and a refused O_DIRECT write goes buffered, losing nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "temp_dir.hpp"
#include "trace/call_drain.hpp"

namespace probecost::trace_run {
namespace {

constexpr std::size_t kPage = SpoolWriter::kPage;

// Page-aligned memory, as a ring of the call buffer is, filled with a pattern of 16-byte records.
struct Ring {
  std::size_t size = 8 * kPage;
  std::uint8_t* at = static_cast<std::uint8_t*>(
      ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  Ring() {
    for (std::size_t i = 0; i < size; ++i) at[i] = static_cast<std::uint8_t>(i * 7 + i / 4096);
  }
  ~Ring() { ::munmap(at, size); }
};

// Pieces as the drain hands them over: whole sub-buffers, a partial flush, a piece that starts
// and ends inside pages, one that starts past a page's start and holds whole pages.
const std::vector<std::pair<std::size_t, std::size_t>> kPieces = {{0, 2 * kPage},
                                                                  {2 * kPage, 96},
                                                                  {2 * kPage + 96, kPage / 2},
                                                                  {3 * kPage - 2048, 3 * kPage},
                                                                  {6 * kPage + 16, kPage + 64},
                                                                  {0, kPage}};

std::vector<std::uint8_t> file_bytes(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(st.st_size));
  EXPECT_EQ(::pread(fd, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
  return out;
}

// Spools kPieces; checks each chunk reads back as its piece. Returns the file's bytes.
std::vector<std::uint8_t> spool_pieces(CallSpool& spool, const Ring& ring) {
  for (const auto& [at, bytes] : kPieces) spool.append(1, ring.at + at, bytes);
  EXPECT_EQ(spool.error(), "");
  std::vector<std::uint8_t> file = file_bytes(spool.fd());
  EXPECT_EQ(spool.chunks().size(), kPieces.size());
  for (std::size_t i = 0; i < spool.chunks().size() && i < kPieces.size(); ++i) {
    const auto& c = spool.chunks()[i];
    EXPECT_EQ(c.bytes, kPieces[i].second);
    EXPECT_LE(c.offset + c.bytes, file.size());
    if (c.offset + c.bytes > file.size()) continue;
    EXPECT_EQ(std::memcmp(file.data() + c.offset, ring.at + kPieces[i].first, c.bytes), 0)
        << "piece " << i;
  }
  EXPECT_EQ(file.size(), spool.chunks().back().offset + spool.chunks().back().bytes);
  EXPECT_EQ(file.size(), spool.size());
  return file;
}

TEST(RecordSpool, DirectAndBufferedWriteTheSameFile) {
  test::TempDir dir;
  Ring ring;
  CallSpool buffered(dir.path, 16, 4, CallSpool::Kind::Calls, kSpoolLimit, SpoolIo::Buffered);
  CallSpool direct(dir.path, 16, 4, CallSpool::Kind::Calls, kSpoolLimit, SpoolIo::Direct);
  EXPECT_FALSE(buffered.writer().direct());
  std::vector<std::uint8_t> a = spool_pieces(buffered, ring);
  std::vector<std::uint8_t> b = spool_pieces(direct, ring);
  EXPECT_EQ(a, b);
  EXPECT_EQ(buffered.writer().direct_bytes(), 0u);
  if (direct.writer().how() != "O_DIRECT")
    GTEST_SKIP() << dir.path << ": " << direct.writer().how();
  // The whole pages of the pieces that hold some, and only those.
  EXPECT_EQ(direct.writer().direct_bytes(), 2 * kPage + 2 * kPage + kPage);
}

TEST(RecordSpool, AWholePageIsAPageOfTheFile) {
  for (std::uint64_t size : {0ull, 16ull, 4095ull, 4096ull, 12345ull}) {
    alignas(4096) static std::uint8_t page[3 * kPage];
    EXPECT_EQ(SpoolWriter::place(page, kPage, size) % kPage, 0u);
    std::uint64_t at = SpoolWriter::place(page + 48, 2 * kPage, size);
    EXPECT_EQ(at % kPage, 48u);
    EXPECT_GE(at, size);
    EXPECT_LT(at, size + kPage);
    EXPECT_EQ(SpoolWriter::place(page + 48, kPage, size), size) << "no whole page: no gap";
  }
}

// A file system that takes the file opened with O_DIRECT and then refuses its writes: the bytes
// go buffered, the same file, and O_DIRECT is off from there on.
TEST(RecordSpool, ARefusedDirectWriteGoesBuffered) {
  test::TempDir dir;
  Ring ring;
  Fd fd = spool_file(dir.path);
  // The same file opened again read-only: every write through it fails (EBADF).
  Fd refusing(::open(("/proc/self/fd/" + std::to_string(fd.get())).c_str(), O_RDONLY));
  ASSERT_TRUE(refusing);
  SpoolWriter w(std::move(fd), std::move(refusing));
  ASSERT_TRUE(w.direct());
  std::string why;
  EXPECT_TRUE(w.write(ring.at, 3 * kPage, 0, why)) << why;
  EXPECT_FALSE(w.direct());
  EXPECT_NE(w.how().find("O_DIRECT refused a write"), std::string::npos) << w.how();
  EXPECT_TRUE(w.write(ring.at + 3 * kPage, kPage, 3 * kPage, why)) << why;
  std::vector<std::uint8_t> file = file_bytes(w.fd());
  ASSERT_EQ(file.size(), 4 * kPage);
  EXPECT_EQ(std::memcmp(file.data(), ring.at, file.size()), 0);
  EXPECT_EQ(w.direct_bytes(), 0u);
}

// tmpfs takes O_DIRECT at open but states no alignment (it copies into its pages anyway): the
// spool stays buffered there, and says so.
TEST(RecordSpool, TmpfsIsWrittenBuffered) {
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0 || ::access("/dev/shm", W_OK) != 0)
    GTEST_SKIP() << "no writable /dev/shm";
  Ring ring;
  CallSpool spool("/dev/shm", 16, 4, CallSpool::Kind::Calls, kSpoolLimit, SpoolIo::Direct);
  if (spool.writer().direct()) GTEST_SKIP() << "this /dev/shm states direct I/O";
  EXPECT_NE(spool.writer().how().find("buffered"), std::string::npos) << spool.writer().how();
  spool_pieces(spool, ring);
}

TEST(RecordSpool, TheEnvironmentChoosesHowTheSpoolIsWritten) {
  ::setenv("PROBECOST_SPOOL_IO", "buffered", 1);
  EXPECT_EQ(spool_io_from_env(), SpoolIo::Buffered);
  ::setenv("PROBECOST_SPOOL_IO", "direct", 1);
  EXPECT_EQ(spool_io_from_env(), SpoolIo::Direct);
  ::setenv("PROBECOST_SPOOL_IO", "fast", 1);
  EXPECT_THROW(spool_io_from_env(), Error);
  ::unsetenv("PROBECOST_SPOOL_IO");
  EXPECT_EQ(spool_io_from_env(), SpoolIo::Direct);
}

}  // namespace
}  // namespace probecost::trace_run
