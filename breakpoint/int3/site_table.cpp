#include "breakpoint/int3/site_table.hpp"

#include <algorithm>
#include <exception>

namespace probecost {

namespace {
auto lower(std::vector<std::unique_ptr<BreakpointSite>>& v, RuntimeAddr at) {
  return std::lower_bound(v.begin(), v.end(), at,
                          [](const auto& s, RuntimeAddr a) { return s->address() < a; });
}
}  // namespace

BreakpointSite& SiteTable::add(RuntimeAddr at, std::string label) {
  auto it = lower(sites_, at);
  if (it != sites_.end() && (*it)->address() == at) return **it;
  it = sites_.insert(
      it, std::make_unique<BreakpointSite>(*memory_, at, std::move(label), &watcher_, &recorder_));
  return **it;
}

void SiteTable::remove(RuntimeAddr at) {
  auto it = lower(sites_, at);
  if (it == sites_.end() || (*it)->address() != at) return;
  bool was_enabled = (*it)->enabled();
  (*it)->disable();
  if (was_enabled && recorder_.removed) recorder_.removed(at);
  sites_.erase(it);
}

BreakpointSite* SiteTable::find(RuntimeAddr at) {
  auto it = lower(sites_, at);
  return (it != sites_.end() && (*it)->address() == at) ? it->get() : nullptr;
}

void SiteTable::disable_all() {
  std::exception_ptr first;
  for (auto& s : sites_) {
    try {
      s->disable();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void SiteTable::forget_all() {
  for (auto& s : sites_) s->forget();
}

}  // namespace probecost
