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

std::vector<std::uint64_t> StackCollector::capture(pid_t tid) {
  auto it = handles_.find(tid);
  if (it == handles_.end()) it = handles_.emplace(tid, _UPT_create(tid)).first;
  std::vector<std::uint64_t> ips;
  unw_cursor_t cursor;
  if (unw_init_remote(&cursor, static_cast<unw_addr_space_t>(address_space_), it->second) < 0) {
    return ips;
  }
  do {
    unw_word_t ip = 0;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
    ips.push_back(ip);
  } while (ips.size() < max_depth_ && unw_step(&cursor) > 0);
  return ips;
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
