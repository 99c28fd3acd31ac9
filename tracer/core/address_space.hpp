#pragma once
// AddressSpace: the memory of one traced process, what we put in it and what we know of it
// (rr's AddressSpace beside its tasks): the int3 sites, the jump patches, where relocated copies
// of its instructions run, the mappings we made (scratch pages, trampoline areas, the trap
// area, the semaphore table), which code each of our bytes went into, and /proc/PID/maps as
// read last. It reads and writes only through ProcMemory and /proc: whatever needs a thread
// of the process (an injected mmap, a signal handler, a wait) is TracedProcess's, which owns
// one AddressSpace and the ThreadSet that runs in it.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "breakpoint/int3/site_table.hpp"
#include "breakpoint/jump/patch_site.hpp"
#include "breakpoint/x86/copy_map.hpp"
#include "tracer/core/our_mappings.hpp"
#include "tracer/core/thread_set.hpp"
#include "tracer/os/code_identity.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/memory.hpp"

namespace probecost {

// A site or jump whose bytes were left alone (AddressSpace::forget_moved_code).
struct LeftAlone {
  RuntimeAddr at;
  std::string label, why;
  bool int3 = false;  // an int3 site's (else a jump's)
  std::string text() const { return at.hex() + " (" + label + "): " + why; }
};

class AddressSpace {
 public:
  // The memory of process `pid`, whose tasks are `threads` (they say when the maps can change).
  AddressSpace(pid_t pid, const ThreadSet& threads)
      : pid_(pid), threads_(threads), memory_(pid), sites_(memory_) {}
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  ProcMemory& memory() { return memory_; }
  SiteTable& sites() { return sites_; }
  // Jump-patched sites: owned here so that every way out removes them, as it does int3 bytes.
  PatchSite& add_patch(const JumpPatch& patch, std::string label);
  const std::vector<std::unique_ptr<PatchSite>>& patches() const { return patches_; }
  // Where relocated copies of its instructions run (out-of-line copies, jump trampolines): a
  // fault raised in one is given to the program as the original's (tracer/core/fault_fixup.hpp).
  CopyMap& relocated() { return relocated_; }
  // What we mapped in the process (trampoline areas, the call buffer, scratch pages), which
  // detach takes out again where no thread can be in it (tracer/core/our_mappings.hpp).
  OurMappings& our_mappings() { return our_mappings_; }
  // An out-of-line step-over's scratch page (TracedProcess::map_scratch), taken out at detach
  // with our other mappings (let_go_of_scratch_pages).
  void add_scratch_page(RuntimeAddr page) { scratch_pages_.push_back(page); }
  // Every int3 is out and every thread moved out of the copies: the pages join our mappings,
  // whose release unmaps each page no thread's RIP or signal frame is in.
  void let_go_of_scratch_pages();

  // /proc/PID/maps, kept from the last read while every task in this memory has stayed stopped.
  std::vector<Mapping> maps();
  // The mapping that holds `at` now, nullptr if none: from the maps as read last, else maps();
  // forget_moved_code() takes maps() afresh: a library dlopen'd where one was is not taken for
  // it.
  const Mapping* mapping_at(RuntimeAddr at);
  // Records which code (file, offset: code_identity.hpp) each enabled int3 site and installed
  // jump holds, for those not recorded yet (from maps()).
  void note_code();
  // Forgets, without writing a byte, every site and jump whose code is no longer the one it
  // went into (its library dlclose'd, another mapped there) or whose bytes are no longer ours.
  // Returns what it left alone and why.
  std::vector<LeftAlone> forget_moved_code();
  // An address we wrote to (a site's, a jump's), to ask whether the memory is still there.
  std::optional<RuntimeAddr> an_address_of_ours() const;

  // The memory went away (the process ended, or exec'd): nothing of ours is left to take out.
  void forget_all();
  // exec: the process has a new memory (and /proc/PID/mem must be opened again).
  void replaced_by_exec();
  // The new image after an exec: what the old one had is dropped (resume_after_exec).
  void clear();

  // Whether a fork child's `child` memory (at its first stop: it has run none of its code)
  // holds the bytes we wrote at `site` (an int3, or a jump's): a fork's copy may come before.
  bool copy_holds(TraceeMemory& child, RuntimeAddr site);
  // This is the memory of a fork child of `parent`'s process: it holds the parent's scratch
  // pages mapped before the fork, the same code at the same addresses, the same copies.
  void inherit_copies(const AddressSpace& parent);

 private:
  pid_t pid_;
  const ThreadSet& threads_;
  ProcMemory memory_;
  SiteTable sites_;
  std::vector<std::unique_ptr<PatchSite>> patches_;
  CopyMap relocated_;
  OurMappings our_mappings_;
  std::vector<RuntimeAddr> scratch_pages_;
  std::map<RuntimeAddr, CodeIdentity> code_;   // note_code()
  std::vector<Mapping> maps_seen_, maps_now_;  // mapping_at(), maps()
  std::optional<std::uint64_t> maps_now_at_;   // Task::resumes() when maps_now_ was read stopped
};

}  // namespace probecost
