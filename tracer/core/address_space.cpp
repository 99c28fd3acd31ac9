// AddressSpace (address_space.hpp): our bytes and mappings in one process's memory, its maps,
// which code our bytes went into, and leaving alone what is no longer that code (see
// code_identity.hpp).
#include "tracer/core/address_space.hpp"

#include <algorithm>

#include "breakpoint/int3/outline.hpp"
#include "common/error.hpp"

namespace probecost {

PatchSite& AddressSpace::add_patch(const JumpPatch& patch, std::string label) {
  patches_.push_back(std::make_unique<PatchSite>(memory_, patch, std::move(label)));
  return *patches_.back();
}

void AddressSpace::let_go_of_scratch_pages() {
  for (RuntimeAddr page : scratch_pages_)
    our_mappings_.add({OurMapping::Kind::ScratchPage, page, kPageSize, 0});
  scratch_pages_.clear();
}

void AddressSpace::note_code() {
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
std::vector<Mapping> AddressSpace::maps() {
  if (maps_now_at_ && *maps_now_at_ == Task::resumes()) return maps_now_;
  std::uint64_t resumes = Task::resumes();
  bool stopped = threads_.memory_at_rest();
  maps_now_ = read_maps(threads_.proc_tid());
  maps_now_at_.reset();
  if (stopped) maps_now_at_ = resumes;
  return maps_now_;
}

const Mapping* AddressSpace::mapping_at(RuntimeAddr at) {
  for (int pass = 0; pass < 2; ++pass) {
    auto m = std::find_if(maps_seen_.begin(), maps_seen_.end(),
                          [&](const Mapping& m) { return m.contains(at); });
    if (m != maps_seen_.end()) return &*m;
    if (pass == 0) maps_seen_ = maps();
  }
  return nullptr;
}

std::vector<LeftAlone> AddressSpace::forget_moved_code() {
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
    code_.erase(s->address());
    out.push_back({s->address(), s->label(), w, true});
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

std::optional<RuntimeAddr> AddressSpace::an_address_of_ours() const {
  if (sites_.size()) return (*sites_.begin())->address();
  if (!patches_.empty()) return patches_.front()->address();
  return std::nullopt;
}

void AddressSpace::forget_all() {
  sites_.forget_all();
  for (auto& p : patches_) p->forget();
  our_mappings_.forget_all();
}

void AddressSpace::replaced_by_exec() {
  forget_all();
  maps_seen_.clear();
  maps_now_at_.reset();
  memory_.reopen();
}

void AddressSpace::clear() {
  sites_.clear();
  sites_.set_recorder({});
  patches_.clear();
  relocated_.clear();
  scratch_pages_.clear();
  code_.clear();
}

bool AddressSpace::copy_holds(TraceeMemory& child, RuntimeAddr site) {
  try {
    if (BreakpointSite* s = sites_.find(site); s && s->enabled())
      return child.read_byte(site) == kInt3;
    for (const auto& p : patches_) {
      if (!p->installed() || p->address() != site) continue;
      auto ours = p->patch().patch_bytes();
      std::vector<std::uint8_t> now(ours.size());
      child.read(site, now);
      return std::equal(ours.begin(), ours.end(), now.begin());
    }
  } catch (const Error&) {
  }
  return false;
}

namespace {

// The pages of `pages` mapped in the child (the outline step-over's scratch pages).
std::vector<RuntimeAddr> mapped_in(pid_t pid, const std::vector<RuntimeAddr>& pages) {
  auto maps = read_maps(pid);
  std::vector<RuntimeAddr> out;
  for (RuntimeAddr p : pages) {
    for (const auto& m : maps) {
      if (m.contains(p) && m.exec && m.path.empty()) out.push_back(p);
    }
  }
  return out;
}

}  // namespace

void AddressSpace::inherit_copies(const AddressSpace& parent) {
  scratch_pages_ = mapped_in(pid_, parent.scratch_pages_);
  code_ = parent.code_;            // the same files at the same addresses
  relocated_ = parent.relocated_;  // and so were the copies: a fault in one, a detach
}

}  // namespace probecost
