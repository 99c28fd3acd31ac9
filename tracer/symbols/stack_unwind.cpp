#include "tracer/symbols/stack_unwind.hpp"

#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/error.hpp"
#include "tracer/symbols/dwfl_callbacks.hpp"
#include "tracer/symbols/dwfl_modules.hpp"

namespace probecost {

struct SnapshotUnwinder::Walk {
  const jump::StackSnapshot* snapshot = nullptr;
  bool read_outside = false;  // the unwinder asked for a word the copy does not have
  std::uint64_t needed = 0;   // the end of the highest word read, from sp
  pid_t tid = 0;
  // Where libdw's walk starts: the snapshot's registers, or the frame the cached rules reached.
  FrameRegs start;
  std::uint64_t start_pc = 0;
  // The snapshot's bytes are the tracee's (its ring): each is copied here before it is read,
  // kKeep at a time as the walk reaches them, and read from here only (a word read twice
  // reads the same), without copying the whole stack for the ~1 KiB most walks need.
  std::vector<std::uint8_t> copy;
  std::size_t copied = 0;
  static constexpr std::size_t kKeep = 1024;
};

namespace {

// x86-64 DWARF register numbers (the psABI's): rbx 3, rbp 6, rsp 7, r12-r15 12-15. The others
// (rax, rcx, rdx, rsi, rdi, r8-r11) were not saved: caller-saved, so no caller's frame needs
// them, and libdw treats them as undefined.
constexpr int kRbx = 3, kRbp = 6, kRsp = 7, kR12 = 12;

bool read_word(void* arg, std::uint64_t addr, std::uint64_t* result) {
  auto* w = static_cast<SnapshotUnwinder::Walk*>(arg);
  const jump::StackSnapshot& s = *w->snapshot;
  if (addr >= s.sp && addr - s.sp + sizeof *result <= s.stack.size()) {
    const std::size_t end = addr - s.sp + sizeof *result;
    if (end > w->copied) {
      using Walk = SnapshotUnwinder::Walk;
      std::size_t upto =
          std::min(s.stack.size(), (end + Walk::kKeep - 1) / Walk::kKeep * Walk::kKeep);
      if (w->copy.size() < upto) w->copy.resize(s.stack.size());
      std::memcpy(w->copy.data() + w->copied, s.stack.data() + w->copied, upto - w->copied);
      w->copied = upto;
    }
    std::memcpy(result, w->copy.data() + (addr - s.sp), sizeof *result);
    w->needed = std::max<std::uint64_t>(w->needed, end);
    return true;
  }
  w->read_outside = true;
  return false;
}

bool memory_read(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* arg) {
  return read_word(arg, addr, result);
}

pid_t next_thread(Dwfl*, void*, void**) {
  return 0;  // none to list: unwind() names its one thread with get_thread
}

bool get_thread(Dwfl*, pid_t tid, void* arg, void** thread_arg) {
  auto* w = static_cast<SnapshotUnwinder::Walk*>(arg);
  *thread_arg = w;
  return tid == w->tid && w->snapshot;
}

FrameRegs snapshot_regs(const jump::StackSnapshot& s) {
  FrameRegs regs;
  regs.put(kRbx, s.rbx);
  regs.put(kRbp, s.rbp);
  regs.put(kRsp, s.sp);
  const std::uint64_t r12_15[4] = {s.r12, s.r13, s.r14, s.r15};
  for (int i = 0; i < 4; ++i) regs.put(kR12 + i, r12_15[i]);
  return regs;
}

bool set_initial_registers(Dwfl_Thread* thread, void* arg) {
  const auto& w = *static_cast<SnapshotUnwinder::Walk*>(arg);
  for (unsigned r = 0; r < FrameRegs::kCount; ++r) {
    Dwarf_Word v = w.start.value[r];
    if (w.start.has(r) && !dwfl_thread_state_registers(thread, static_cast<int>(r), 1, &v))
      return false;
  }
  dwfl_thread_state_register_pc(thread, w.start_pc);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    next_thread, get_thread, memory_read, set_initial_registers, nullptr, nullptr,
};

struct Frames {
  std::vector<std::uint64_t>* ips;
  unsigned max_depth;
  bool skip_first;  // the frame libdw starts from was counted by the cached rules' walk
};

int on_frame(Dwfl_Frame* frame, void* arg) {
  auto* f = static_cast<Frames*>(arg);
  if (f->skip_first) {
    f->skip_first = false;
    return DWARF_CB_OK;
  }
  Dwarf_Addr pc = 0;
  if (!dwfl_frame_pc(frame, &pc, nullptr) || pc == 0) return DWARF_CB_ABORT;
  f->ips->push_back(pc);
  return f->ips->size() < f->max_depth ? DWARF_CB_OK : DWARF_CB_ABORT;
}

}  // namespace

SnapshotUnwinder::SnapshotUnwinder(pid_t pid, unsigned max_depth, bool cached_rules)
    : pid_(pid),
      max_depth_(max_depth),
      cached_rules_(cached_rules),
      walk_(std::make_unique<Walk>()) {
  walk_->tid = pid;
  report();
}

SnapshotUnwinder::~SnapshotUnwinder() {
  if (dwfl_) dwfl_end(dwfl_);
}

// A new Dwfl each time: dwfl_attach_state is once per Dwfl, and a Dwfl's modules are its
// report's. Its CFI is parsed once per module and kept until then. Swapped in only once it is
// whole: a refresh that fails (the process gone) keeps the modules read before, never a null
// Dwfl (dwfl_getthread_frames would dereference it).
void SnapshotUnwinder::report() {
  Dwfl* fresh = dwfl_begin(process_callbacks());
  if (!fresh) throw Error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
  int r = dwfl_linux_proc_report(fresh, pid_);
  if (r != 0) {
    std::string why = r < 0 ? dwfl_errmsg(-1) : std::strerror(r);
    dwfl_end(fresh);
    throw Error("cannot read the modules of process " + std::to_string(pid_) + ": " + why);
  }
  dwfl_report_end(fresh, nullptr, nullptr);
  tag_modules_with_pid(fresh, pid_);
  if (!dwfl_attach_state(fresh, nullptr, pid_, &kThreadCallbacks, walk_.get())) {
    std::string why = dwfl_errmsg(-1);
    dwfl_end(fresh);
    throw Error("dwfl_attach_state: " + why);
  }
  if (dwfl_) dwfl_end(dwfl_);
  dwfl_ = fresh;
  rules_.clear();
}

void SnapshotUnwinder::refresh() {
  report();
}

// The frames the cached rules unwind, from walk_->start: DWARF_CB_ABORT (the depth reached) or
// 0 (the outermost frame), as dwfl_getthread_frames would return; nullopt where a frame's rule
// is not a simple one: libdw goes on from walk_->start and start_pc (that frame, counted).
std::optional<int> SnapshotUnwinder::walk_cached(std::vector<std::uint64_t>& ips) {
  Walk& w = *walk_;
  FrameRegs caller;
  auto read = [&w](std::uint64_t addr, std::uint64_t* word) { return read_word(&w, addr, word); };
  for (bool initial = true;; initial = false) {
    const std::uint64_t pc = w.start_pc;
    if (pc == 0) return DWARF_CB_ABORT;  // as on_frame
    ips.push_back(pc);
    if (ips.size() >= max_depth_) return DWARF_CB_ABORT;
    // libdw looks a return address up less 1 (the call, not what follows it). A frame it
    // starts from is its initial frame, looked up as is: give it the pc it would look up.
    const std::uint64_t at = initial ? pc : pc - 1;
    const UnwindRule* rule = rules_.find(dwfl_, at);
    if (!rule) {
      w.start_pc = at;
      ++use_.libdw;
      return std::nullopt;
    }
    ++use_.cached;
    if (!UnwindRules::apply(*rule, w.start, caller, read)) return 0;
    std::swap(w.start, caller);
    w.start_pc = w.start.value[FrameRegs::kReturn];
  }
}

SnapshotUnwinder::Stack SnapshotUnwinder::unwind(const jump::StackSnapshot& snapshot) {
  Stack out;
  out.ips.reserve(std::min(max_depth_, 64u));
  walk_->snapshot = &snapshot;
  walk_->read_outside = false;
  walk_->needed = 0;
  walk_->copied = 0;
  walk_->start = snapshot_regs(snapshot);
  walk_->start_pc = snapshot.rip;
  std::optional<int> r;
  if (cached_rules_) r = walk_cached(out.ips);
  if (!r) {
    Frames frames{&out.ips, max_depth_, !out.ips.empty()};
    r = dwfl_getthread_frames(dwfl_, pid_, on_frame, &frames);
  }
  out.truncated = walk_->read_outside && *r != DWARF_CB_ABORT;
  out.needed = walk_->needed;
  walk_->snapshot = nullptr;
  return out;
}

bool SnapshotUnwinder::knows(std::uint64_t pc) const {
  return dwfl_addrmodule(dwfl_, pc) != nullptr;
}

std::string SnapshotUnwinder::describe(std::uint64_t pc, bool caller) {
  std::uint64_t at = caller ? pc - 1 : pc;
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_, at);
  if (!mod)
    return "0x" + [&] {
      char b[32];
      std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(pc));
      return std::string(b);
    }();
  GElf_Off off = 0;
  GElf_Sym sym;
  const char* name = dwfl_module_addrinfo(mod, at, &off, &sym, nullptr, nullptr, nullptr);
  std::string module = base_name(module_path(mod));
  char b[64];
  std::snprintf(b, sizeof b, "+0x%llx", static_cast<unsigned long long>(pc - (at - off)));
  return (name ? std::string(name) : std::string("??")) + (name ? b : "") + " in " + module;
}

}  // namespace probecost
