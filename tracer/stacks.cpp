#include "tracer/stacks.hpp"

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
  unw_cursor_t cursor;
  if (!init(tid, &cursor)) return pcs;
  // libunwind's x86-64 unw_is_signal_frame() has meant both: the sigreturn trampoline's frame
  // (older releases, which look for its code), and the frame unwound through it, whose
  // registers come from the saved sigcontext (1.6: sigcontext_format). Both are taken: the
  // extra one is the trampoline's own IP, or the interrupted function's return address, and
  // neither can be strictly inside a patched range (it holds no call and no system call).
  bool after_signal_frame = false;
  for (unsigned depth = 0; depth < max_depth_; ++depth) {
    unw_word_t ip = 0;
    bool signal_frame = unw_is_signal_frame(&cursor) > 0;
    if ((signal_frame || after_signal_frame) && unw_get_reg(&cursor, UNW_REG_IP, &ip) == 0)
      pcs.push_back(ip);
    after_signal_frame = signal_frame;
    if (unw_step(&cursor) <= 0) break;
  }
  return pcs;
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
