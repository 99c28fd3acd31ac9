#include "trace/stack_feed.hpp"

#include <sys/mman.h>
#include <time.h>

#include <cstdlib>

#include "common/error.hpp"

namespace probecost::trace_run {

namespace {

std::string spool_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/var/tmp";
}

CallDrain::Options drain_options(bool writers_syscall) {
  CallDrain::Options o;
  o.writers_syscall = writers_syscall;
  return o;
}

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

StackFeed::StackFeed(jump::CallReader& reader, pid_t pid, unsigned max_depth, bool writers_syscall)
    : unwinder_(pid, max_depth),
      spool_(spool_dir(), reader.layout().record_size, reader.layout().max_ids),
      drain_(reader, spool_, drain_options(writers_syscall)) {}

StackFeed::~StackFeed() {
  drain_.finish();
}

void StackFeed::refresh() {
  unwinder_.refresh();
}

const std::string& StackFeed::error() const {
  return drain_.error().empty() ? spool_.error() : drain_.error();
}

// The spool, mapped, read chunk by chunk (the drain wrote them: whole records). Every field of
// a record is the tracee's: decode_snapshot clamps the copy to its slot.
void StackFeed::each_stack(
    const std::function<void(std::uint64_t, const std::vector<std::uint64_t>&)>& f) {
  std::uint64_t size = spool_.size();
  if (!size) return;
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, spool_.fd(), 0);
  if (m == MAP_FAILED) throw Error::from_errno("cannot map the stack spool");
  const auto* base = static_cast<const std::uint8_t*>(m);
  const std::uint32_t rs = spool_.record_size();
  double t0 = thread_cpu_s();
  for (const auto& c : spool_.chunks()) {
    if (c.bytes % rs || c.offset + c.bytes > size) continue;
    for (std::uint64_t at = 0; at < c.bytes; at += rs) {
      jump::StackSnapshot s = jump::decode_snapshot({base + c.offset + at, rs});
      ++counts_.snapshots;
      if (s.bound != jump::SnapshotBound::Bounded) {
        ++counts_.not_copied[s.bound];
        continue;
      }
      auto st = unwinder_.unwind(s);
      if (st.truncated) ++counts_.truncated;
      if (st.ips.empty()) continue;
      ++counts_.unwound;
      f(s.rip, st.ips);
    }
  }
  counts_.unwind_s += thread_cpu_s() - t0;
  ::munmap(m, size);
}

}  // namespace probecost::trace_run
