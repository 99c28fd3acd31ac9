// TracedProcess's USDT semaphores (semaphores.hpp says how they are raised and lowered): the
// table of raises mapped by an injected mmap, and the raises made with every thread stopped.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/int3/trap_records.hpp"

namespace probecost {

// The table mapped before the first raise (a page of anonymous memory,
// read-only to the program), and the semaphore's mapping, for the checks after a death.
void TracedProcess::raise_semaphore(RuntimeAddr at, RuntimeAddr witness) {
  if (!semaphores_.table() && !semaphore_table_tried_) {
    semaphore_table_tried_ = true;
    std::optional<long> r;
    try {
      r = remote_syscall(SYS_mmap, {0, static_cast<long>(sema::kTableSize), PROT_READ,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0});
    } catch (const Error&) {
      // Refused (seccomp), or the thread went: no table, the guardian alone covers a death.
    }
    if (r && (*r >= 0 || *r <= -4096)) {
      RuntimeAddr at(static_cast<std::uint64_t>(*r));
      // A flag of its own (left out of core dumps), so that the kernel never merges it with
      // the program's read-only memory, nor with a records-only trap area, next to it: restore
      // finds each by the header at its start. Without it, restore still looks at each page
      // of a small read-only mapping.
      try {
        remote_syscall(SYS_madvise, {static_cast<long>(at.value()),
                                     static_cast<long>(sema::kTableSize), MADV_DONTDUMP, 0, 0, 0});
      } catch (const Error&) {
      }
      semaphores_.set_table(sema::TableWriter(space_.memory(), at, ::getpid()));
    }
  }
  const Mapping* m = mapping_at(at);
  semaphores_.raise(space_.memory(), at, m ? file_identity(*m, at) : trap::FileIdentity{},
                    guardian_.get(), witness);
}

void TracedProcess::forget_semaphore(RuntimeAddr at) {
  semaphores_.forget(at, guardian_.get());
}

void TracedProcess::let_go_of_semaphore_table() {
  // Every raise lowered: its records say so, and nothing reads it any more.
  if (const auto& t = semaphores_.table(); t && semaphores_.empty())
    space_.our_mappings().add(
        {OurMapping::Kind::SemaphoreTable, t->address(), sema::kTableSize, 0});
  semaphores_.drop_table();
}

}  // namespace probecost
