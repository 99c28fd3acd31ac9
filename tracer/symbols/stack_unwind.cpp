#include "tracer/symbols/stack_unwind.hpp"

#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "tracer/symbols/dwfl_callbacks.hpp"
#include "tracer/symbols/dwfl_modules.hpp"

namespace probecost {

struct SnapshotUnwinder::Walk {
  const jump::StackSnapshot* snapshot = nullptr;
  bool read_outside = false;  // the unwinder asked for a word the copy does not have
  std::uint64_t needed = 0;   // the end of the highest word read, from sp
  pid_t tid = 0;
};

namespace {

// x86-64 DWARF register numbers (the psABI's): rbx 3, rbp 6, rsp 7, r12-r15 12-15. The others
// (rax, rcx, rdx, rsi, rdi, r8-r11) were not saved: caller-saved, so no caller's frame needs
// them, and libdw treats them as undefined.
constexpr int kRbx = 3, kRbp = 6, kR12 = 12;

bool memory_read(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* arg) {
  auto* w = static_cast<SnapshotUnwinder::Walk*>(arg);
  const jump::StackSnapshot& s = *w->snapshot;
  if (addr >= s.sp && addr - s.sp + sizeof *result <= s.stack.size()) {
    std::memcpy(result, s.stack.data() + (addr - s.sp), sizeof *result);
    w->needed = std::max<std::uint64_t>(w->needed, addr - s.sp + sizeof *result);
    return true;
  }
  w->read_outside = true;
  return false;
}

pid_t next_thread(Dwfl*, void*, void**) {
  return 0;  // none to list: unwind() names its one thread with get_thread
}

bool get_thread(Dwfl*, pid_t tid, void* arg, void** thread_arg) {
  auto* w = static_cast<SnapshotUnwinder::Walk*>(arg);
  *thread_arg = w;
  return tid == w->tid && w->snapshot;
}

bool set_initial_registers(Dwfl_Thread* thread, void* arg) {
  const jump::StackSnapshot& s = *static_cast<SnapshotUnwinder::Walk*>(arg)->snapshot;
  Dwarf_Word rbx = s.rbx, rbp_rsp[2] = {s.rbp, s.sp}, r12_15[4] = {s.r12, s.r13, s.r14, s.r15};
  if (!dwfl_thread_state_registers(thread, kRbx, 1, &rbx) ||
      !dwfl_thread_state_registers(thread, kRbp, 2, rbp_rsp) ||
      !dwfl_thread_state_registers(thread, kR12, 4, r12_15))
    return false;
  dwfl_thread_state_register_pc(thread, s.rip);
  return true;
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    next_thread, get_thread, memory_read, set_initial_registers, nullptr, nullptr,
};

struct Frames {
  std::vector<std::uint64_t>* ips;
  unsigned max_depth;
};

int on_frame(Dwfl_Frame* frame, void* arg) {
  auto* f = static_cast<Frames*>(arg);
  Dwarf_Addr pc = 0;
  if (!dwfl_frame_pc(frame, &pc, nullptr) || pc == 0) return DWARF_CB_ABORT;
  f->ips->push_back(pc);
  return f->ips->size() < f->max_depth ? DWARF_CB_OK : DWARF_CB_ABORT;
}

}  // namespace

SnapshotUnwinder::SnapshotUnwinder(pid_t pid, unsigned max_depth)
    : pid_(pid), max_depth_(max_depth), walk_(std::make_unique<Walk>()) {
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
}

void SnapshotUnwinder::refresh() {
  report();
}

SnapshotUnwinder::Stack SnapshotUnwinder::unwind(const jump::StackSnapshot& snapshot) {
  Stack out;
  walk_->snapshot = &snapshot;
  walk_->read_outside = false;
  walk_->needed = 0;
  Frames frames{&out.ips, max_depth_};
  int r = dwfl_getthread_frames(dwfl_, pid_, on_frame, &frames);
  out.truncated = walk_->read_outside && r != DWARF_CB_ABORT;
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
