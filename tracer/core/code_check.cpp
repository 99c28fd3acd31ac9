// Which code our bytes went into, and leaving alone what is no longer that code (see
// code_identity.hpp).
#include <algorithm>

#include "common/error.hpp"
#include "tracer/core/process.hpp"
#include "tracer/int3/int3_area.hpp"

namespace probecost {

void TracedProcess::note_code() {
  std::optional<std::vector<Mapping>> maps;
  auto note = [&](RuntimeAddr at) {
    if (code_.count(at)) return;
    if (!maps) maps = this->maps();
    if (auto id = code_identity(*maps, at)) code_.emplace(at, *id);
  };
  for (const auto& s : sites_) {
    if (s->enabled()) note(s->address());
  }
  for (const auto& p : patches_) {
    if (p->installed()) note(p->address());
  }
}

// The maps change only by what runs in this memory: read while every task that shares it is in
// a ptrace-stop (or exiting), they hold until one is resumed (Task::resumes), an injected
// system call's thread too (its mmap). A thread inside vfork() is not stopped: its child, which
// we may not trace (one made before the attach), runs in the memory meanwhile. A fork child
// has a memory of its own. Unseen: a process that shares the memory (clone(CLONE_VM) without
// CLONE_THREAD) made before the attach, which no task of ours names; its mmaps were as unseen
// between two reads before.
std::vector<Mapping> TracedProcess::maps() {
  if (maps_now_at_ && *maps_now_at_ == Task::resumes()) return maps_now_;
  std::uint64_t resumes = Task::resumes();
  bool stopped = std::all_of(tasks_.begin(), tasks_.end(), [](const auto& kv) {
    const Task& t = kv.second;
    if (t.role() == Task::Role::ForkChild) return true;
    return (t.stopped() || t.state() == Task::State::Exiting) && !t.in_vfork;
  });
  maps_now_ = read_maps(proc_tid());
  maps_now_at_.reset();
  if (stopped) maps_now_at_ = resumes;
  return maps_now_;
}

const Mapping* TracedProcess::mapping_at(RuntimeAddr at) {
  for (int pass = 0; pass < 2; ++pass) {
    auto m = std::find_if(maps_seen_.begin(), maps_seen_.end(),
                          [&](const Mapping& m) { return m.contains(at); });
    if (m != maps_seen_.end()) return &*m;
    if (pass == 0) maps_seen_ = maps();
  }
  return nullptr;
}

std::vector<LeftAlone> TracedProcess::forget_moved_code() {
  std::vector<LeftAlone> out;
  maps_seen_.clear();  // read again when next needed: a library may have come or gone
  if (code_.empty()) return out;
  maps_seen_ = this->maps();
  const auto& maps = maps_seen_;
  // Empty when the bytes may go back; the bytes read where something is still mapped.
  auto why = [&](RuntimeAddr at, std::span<const std::uint8_t> ours) -> std::string {
    auto then = code_.find(at);
    if (then == code_.end()) return {};
    std::vector<std::uint8_t> now(ours.size());
    if (code_identity(maps, at)) {
      try {
        memory_.read(at, now);
      } catch (const Error&) {
        now.clear();
      }
    }
    return why_not_ours(then->second, maps, at, ours, now);
  };
  const std::uint8_t int3[] = {kInt3};
  for (const auto& s : sites_) {
    if (!s->enabled()) continue;
    std::string w = why(s->address(), int3);
    if (w.empty()) continue;
    s->forget();
    // Its record too: the SIGTRAP handler goes by the records alone, and would send a thread
    // that hits an int3 of ours at the same address in the next library there (probed again)
    // to this one's copy.
    if (int3_area_) int3_area_->removed(s->address());
    code_.erase(s->address());
    out.push_back({s->address(), s->label(), w});
  }
  for (const auto& p : patches_) {
    if (!p->installed()) continue;
    std::string w = why(p->address(), p->patch().patch_bytes());
    if (w.empty()) continue;
    p->forget();
    code_.erase(p->address());
    out.push_back({p->address(), p->label(), w});
  }
  return out;
}

}  // namespace probecost
