#include "tracer/core/stacks.hpp"

#include <libunwind-ptrace.h>

#include "common/error.hpp"

namespace probecost {

StackCollector::StackCollector(unsigned max_depth) : max_depth_(max_depth) {
  unw_addr_space_t as = unw_create_addr_space(&_UPT_accessors, 0);
  if (!as) throw Error("unw_create_addr_space failed");
  unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
  address_space_ = as;
}

StackCollector::~StackCollector() {
  for (auto& [tid, h] : handles_) _UPT_destroy(h);
  unw_destroy_addr_space(static_cast<unw_addr_space_t>(address_space_));
}

bool StackCollector::init(pid_t tid, void* cursor) {
  auto it = handles_.find(tid);
  if (it == handles_.end()) it = handles_.emplace(tid, _UPT_create(tid)).first;
  return unw_init_remote(static_cast<unw_cursor_t*>(cursor),
                         static_cast<unw_addr_space_t>(address_space_), it->second) >= 0;
}

std::vector<std::uint64_t> StackCollector::capture(pid_t tid) {
  std::vector<std::uint64_t> ips;
  unw_cursor_t cursor;
  if (!init(tid, &cursor)) return ips;
  do {
    unw_word_t ip = 0;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
    ips.push_back(ip);
  } while (ips.size() < max_depth_ && unw_step(&cursor) > 0);
  return ips;
}

std::vector<std::uint64_t> StackCollector::interrupted_pcs(pid_t tid) {
  std::vector<std::uint64_t> pcs;
  for (const auto& r : signal_returns(tid)) pcs.push_back(r.pc);
  return pcs;
}

std::vector<StackCollector::SignalReturn> StackCollector::signal_returns(pid_t tid) {
  std::vector<SignalReturn> out;
  unw_cursor_t cursor;
  if (!init(tid, &cursor)) return out;
  // libunwind's x86-64 unw_is_signal_frame() has meant both: the sigreturn trampoline's frame
  // (older releases, which look for its code), and the frame unwound through it, whose
  // registers come from the saved sigcontext (1.6: sigcontext_format). Both are taken: the
  // extra one is the trampoline's own IP, or the interrupted function's return address, and
  // neither can be strictly inside a patched range (it holds no call and no system call).
  //
  // The frame unwound through the signal frame has its registers' save locations in the
  // kernel's rt_sigframe (arch/x86/include/asm/sigframe.h): at the handler's entry RSP points
  // at {pretcode (the return address, __restore_rt), struct ucontext uc, siginfo info}; the
  // handler's ret pops pretcode, so __restore_rt's RSP is &uc, and rt_sigreturn restores RIP
  // from uc.uc_mcontext.rip (glibc's gregs[REG_RIP], 168 bytes in). libunwind reads it there
  // (DWARF CFI of __restore_rt, or its own sigcontext handling), and says so by its save
  // location.
  bool after_signal_frame = false;
  for (unsigned depth = 0; depth < max_depth_; ++depth) {
    unw_word_t ip = 0;
    bool signal_frame = unw_is_signal_frame(&cursor) > 0;
    if ((signal_frame || after_signal_frame) && unw_get_reg(&cursor, UNW_REG_IP, &ip) == 0) {
      unw_save_loc_t loc{};
      bool memory = unw_get_save_loc(&cursor, UNW_REG_IP, &loc) == 0 && loc.type == UNW_SLT_MEMORY;
      out.push_back({ip, memory ? static_cast<std::uint64_t>(loc.u.addr) : 0});
    }
    after_signal_frame = signal_frame;
    if (unw_step(&cursor) <= 0) break;
  }
  return out;
}

void StackCollector::forget(pid_t tid) {
  auto it = handles_.find(tid);
  if (it == handles_.end()) return;
  _UPT_destroy(it->second);
  handles_.erase(it);
}

void StackCollector::flush() {
  unw_flush_cache(static_cast<unw_addr_space_t>(address_space_), 0, 0);
}

}  // namespace probecost
