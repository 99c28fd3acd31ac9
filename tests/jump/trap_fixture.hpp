#pragma once
// This test process as a traced process whose tracer has died: its own trap area, mapped near
// its kind sites, with the handler installed over the SIGTRAP disposition of the moment.
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <vector>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "breakpoint/in_tracee/trap_handler.hpp"
#include "breakpoint/x86/decoder.hpp"
#include "common/error.hpp"
#include "self_patch.hpp"

namespace probecost::trap {

using selftest::SelfMemory;

inline KernelSigaction sigtrap_disposition(const KernelSigaction* set = nullptr) {
  KernelSigaction old{};
  if (syscall(SYS_rt_sigaction, SIGTRAP, set, &old, 8) != 0) throw Error::from_errno("sigaction");
  return old;
}

// A read-exec anonymous mapping within 1 GiB of `near`, as the tracer maps one in a tracee.
inline RuntimeAddr map_area(RuntimeAddr near, std::uint64_t size) {
  constexpr std::uint64_t kStep = 16ull << 20;
  for (std::uint64_t k = 1; k < 64; ++k) {
    for (std::int64_t sign : {-1, 1}) {
      std::uint64_t hint =
          (near.value() & ~(kStep - 1)) + sign * static_cast<std::int64_t>(k * kStep);
      void* p = mmap(reinterpret_cast<void*>(hint), size, PROT_READ | PROT_EXEC,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p != MAP_FAILED) return RuntimeAddr(reinterpret_cast<std::uint64_t>(p));
    }
  }
  throw Error("no room for the trap area");
}

// The area of this process, with our handler installed over the program's disposition of the
// moment, for one test.
class InstalledHandler {
 public:
  InstalledHandler()
      : layout_(Layout::of(64, true, 64)),
        at_(map_area(selftest::address_of("probecost_kind_nop"), layout_.size)),
        writer_(SelfMemory::instance(), at_, layout_, getpid()) {
    program_ = sigtrap_disposition();
    KernelSigaction ours = our_disposition(program_, writer_.handler(), writer_.restorer());
    writer_.set_dispositions(program_, ours);
    sigtrap_disposition(&ours);
    writer_.set_state(HandlerState::Installed);
  }
  ~InstalledHandler() {
    unprobe_all();
    sigtrap_disposition(&program_);
    munmap(reinterpret_cast<void*>(at_.value()), layout_.size);
  }
  InstalledHandler(const InstalledHandler&) = delete;
  InstalledHandler& operator=(const InstalledHandler&) = delete;

  // The int3 at `site`, recorded first; the original byte back when the test ends.
  struct Probe {
    RuntimeAddr site;
    std::uint8_t original;
    RuntimeAddr resume;
  };
  Probe probe(RuntimeAddr site, RuntimeAddr tracer_copy = {}) {
    std::uint8_t bytes[15];
    SelfMemory::instance().read(site, bytes);
    auto in = decode(bytes, site);
    if (!in) throw Error("cannot decode at " + site.hex());
    std::string why;
    auto resume = writer_.place_copy(*in, why);
    if (!resume) throw Error("no copy: " + why);
    SiteRecord r;
    r.site = site;
    r.resume = *resume;
    r.moved = moved_addresses(*in, tracer_copy);
    r.original = bytes[0];
    r.length = in->length;
    writer_.add(r);
    SelfMemory::instance().write_byte(site, 0xCC);
    probes_.push_back({site, bytes[0], *resume});
    return probes_.back();
  }
  void unprobe_all() {
    for (const auto& p : probes_) SelfMemory::instance().write_byte(p.site, p.original);
    writer_.remove_all();
    probes_.clear();
  }
  AreaWriter& writer() { return writer_; }

  // Our handler called directly, as the kernel would call it, on a made-up frame.
  void call_handler(siginfo_t& info, ucontext_t& uc) {
    auto fn = reinterpret_cast<void (*)(int, siginfo_t*, void*)>(writer_.handler().value());
    fn(SIGTRAP, &info, &uc);
  }

 private:
  Layout layout_;
  RuntimeAddr at_;
  AreaWriter writer_;
  KernelSigaction program_{};
  std::vector<Probe> probes_;
};

}  // namespace probecost::trap
