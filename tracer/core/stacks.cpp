#include "tracer/core/stacks.hpp"

#include <libunwind-ptrace.h>
#include <sys/user.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "common/error.hpp"
#include "tracer/core/unwind_tables.hpp"
#include "tracer/os/syscalls.hpp"

// libunwind's own search of a remote .eh_frame_hdr table, which libunwind-ptrace's
// _UPT_find_proc_info calls once it has found the table: exported by libunwind-x86_64 (for
// libunwind-ptrace, a separate library), not declared in its public headers.
extern "C" int _Ux86_64_dwarf_search_unwind_table(unw_addr_space_t as, unw_word_t ip,
                                                  unw_dyn_info_t* di, unw_proc_info_t* pi,
                                                  int need_unwind_info, void* arg);

namespace probecost {

namespace {

constexpr std::uint64_t kPage = 4096;
constexpr std::uint64_t kWindowPages = 4;  // read at a time: 16 KiB

using Page = std::array<std::uint8_t, kPage>;

// libunwind's x86-64 register numbers (UNW_X86_64_RAX ... UNW_X86_64_RIP) in user_regs_struct.
std::optional<std::uint64_t> reg_of(const user_regs_struct& r, unw_regnum_t n) {
  switch (n) {
    case UNW_X86_64_RAX:
      return r.rax;
    case UNW_X86_64_RDX:
      return r.rdx;
    case UNW_X86_64_RCX:
      return r.rcx;
    case UNW_X86_64_RBX:
      return r.rbx;
    case UNW_X86_64_RSI:
      return r.rsi;
    case UNW_X86_64_RDI:
      return r.rdi;
    case UNW_X86_64_RBP:
      return r.rbp;
    case UNW_X86_64_RSP:
      return r.rsp;
    case UNW_X86_64_R8:
      return r.r8;
    case UNW_X86_64_R9:
      return r.r9;
    case UNW_X86_64_R10:
      return r.r10;
    case UNW_X86_64_R11:
      return r.r11;
    case UNW_X86_64_R12:
      return r.r12;
    case UNW_X86_64_R13:
      return r.r13;
    case UNW_X86_64_R14:
      return r.r14;
    case UNW_X86_64_R15:
      return r.r15;
    case UNW_X86_64_RIP:
      return r.rip;
    default:
      return std::nullopt;
  }
}

}  // namespace

struct StackCollector::Walk {
  explicit Walk(pid_t t) : tid(t) {}
  pid_t tid;
  void* upt = nullptr;
  UnwindTables* tables = nullptr;
  user_regs_struct regs{};
  bool have_regs = false;
  std::unordered_map<std::uint64_t, std::unique_ptr<Page>> pages;  // by page address
  std::unordered_map<std::uint64_t, bool> unreadable;              // process_vm_readv refused

  // The page at `page` (aligned), read with the window it starts; nullptr if it cannot be read.
  const Page* page_at(std::uint64_t page) {
    if (auto it = pages.find(page); it != pages.end()) return it->second.get();
    if (unreadable.count(page)) return nullptr;
    std::vector<std::uint8_t> window(kPage * kWindowPages);
    ssize_t n = sys::vm_read(tid, window.data(), window.size(), page, kWindowPages);
    std::uint64_t whole = n > 0 ? static_cast<std::uint64_t>(n) / kPage : 0;
    for (std::uint64_t i = 0; i < whole; ++i) {
      auto p = std::make_unique<Page>();
      std::memcpy(p->data(), window.data() + i * kPage, kPage);
      pages.emplace(page + i * kPage, std::move(p));
    }
    if (whole == 0) {
      unreadable.emplace(page, true);
      return nullptr;
    }
    return pages.at(page).get();
  }

  // `size` bytes at `at`, from the pages read; false if one cannot be read.
  bool read(std::uint64_t at, void* out, std::size_t size) {
    auto* to = static_cast<std::uint8_t*>(out);
    while (size > 0) {
      std::uint64_t page = at & ~(kPage - 1), off = at - page;
      const Page* p = page_at(page);
      if (!p) return false;
      std::size_t n = std::min<std::size_t>(size, kPage - off);
      std::memcpy(to, p->data() + off, n);
      at += n, to += n, size -= n;
    }
    return true;
  }
};

namespace {

using Walk = StackCollector::Walk;

// The walk under way. libunwind passes the accessors the argument unw_init_remote was given
// (the Walk), except below _UPT_find_proc_info, which passes on its own (the _UPT handle) to
// the reads of the unwind tables: so the accessors find the walk here, whichever they get.
thread_local Walk* current_walk = nullptr;

class Walking {
 public:
  explicit Walking(Walk& w) { current_walk = &w; }
  ~Walking() { current_walk = nullptr; }
  Walking(const Walking&) = delete;
  Walking& operator=(const Walking&) = delete;
};

Walk& walk_of(void* arg) {
  return current_walk ? *current_walk : *static_cast<Walk*>(arg);
}

// The module's .eh_frame_hdr table found in the process's memory and kept (unwind_tables.hpp);
// libunwind-ptrace's search through the file where there is none.
int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t* pi, int need, void* arg) {
  Walk& w = walk_of(arg);
  if (w.tables) {
    auto read = [&w](std::uint64_t at, void* out, std::size_t size) {
      return w.read(at, out, size);
    };
    if (unw_dyn_info_t* di = w.tables->find(w.tid, ip, read))
      return _Ux86_64_dwarf_search_unwind_table(as, ip, di, pi, need, arg);
  }
  return _UPT_find_proc_info(as, ip, pi, need, w.upt);
}

void put_unwind_info(unw_addr_space_t as, unw_proc_info_t* pi, void* arg) {
  _UPT_put_unwind_info(as, pi, walk_of(arg).upt);
}

int get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t* addr, void* arg) {
  return _UPT_get_dyn_info_list_addr(as, addr, walk_of(arg).upt);
}

int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t* val, int write, void* arg) {
  Walk& w = walk_of(arg);
  std::uint64_t page = addr & ~(kPage - 1), off = addr - page;
  if (!write && off + sizeof *val <= kPage) {
    if (const Page* p = w.page_at(page)) {
      std::memcpy(val, p->data() + off, sizeof *val);
      return 0;
    }
  }
  return _UPT_access_mem(as, addr, val, write, w.upt);  // a word across pages, a write
}

int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t* val, int write, void* arg) {
  Walk& w = walk_of(arg);
  if (!write && !w.have_regs) {
    w.have_regs = sys::ptrace_call(PTRACE_GETREGS, w.tid, nullptr, &w.regs) == 0;
  }
  if (!write && w.have_regs) {
    if (auto v = reg_of(w.regs, reg)) {
      *val = *v;
      return 0;
    }
  }
  return _UPT_access_reg(as, reg, val, write, w.upt);
}

int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t* val, int write, void* arg) {
  return _UPT_access_fpreg(as, reg, val, write, walk_of(arg).upt);
}

int resume(unw_addr_space_t as, unw_cursor_t* c, void* arg) {
  return _UPT_resume(as, c, walk_of(arg).upt);
}

int get_proc_name(unw_addr_space_t as, unw_word_t addr, char* buf, size_t len, unw_word_t* off,
                  void* arg) {
  return _UPT_get_proc_name(as, addr, buf, len, off, walk_of(arg).upt);
}

unw_accessors_t copy_accessors() {
  unw_accessors_t a{};
  a.find_proc_info = find_proc_info;
  a.put_unwind_info = put_unwind_info;
  a.get_dyn_info_list_addr = get_dyn_info_list_addr;
  a.access_mem = access_mem;
  a.access_reg = access_reg;
  a.access_fpreg = access_fpreg;
  a.resume = resume;
  a.get_proc_name = get_proc_name;
  return a;
}

}  // namespace

StackCollector::StackCollector(unsigned max_depth)
    : max_depth_(max_depth), tables_(std::make_unique<UnwindTables>()) {
  static unw_accessors_t accessors = copy_accessors();
  unw_addr_space_t as = unw_create_addr_space(&accessors, 0);
  if (!as) throw Error("unw_create_addr_space failed");
  unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
  address_space_ = as;
}

StackCollector::~StackCollector() {
  for (auto& [tid, h] : handles_) _UPT_destroy(h);
  unw_destroy_addr_space(static_cast<unw_addr_space_t>(address_space_));
}

bool StackCollector::init(Walk& walk, void* cursor) {
  auto it = handles_.find(walk.tid);
  if (it == handles_.end()) it = handles_.emplace(walk.tid, _UPT_create(walk.tid)).first;
  walk.upt = it->second;
  walk.tables = tables_.get();
  return unw_init_remote(static_cast<unw_cursor_t*>(cursor),
                         static_cast<unw_addr_space_t>(address_space_), &walk) >= 0;
}

std::vector<std::uint64_t> StackCollector::capture(pid_t tid) {
  std::vector<std::uint64_t> ips;
  Walk walk(tid);
  Walking walking(walk);
  unw_cursor_t cursor;
  if (!init(walk, &cursor)) return ips;
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
  Walk walk(tid);
  Walking walking(walk);
  unw_cursor_t cursor;
  if (!init(walk, &cursor)) return out;
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
  tables_->clear();
}

}  // namespace probecost
