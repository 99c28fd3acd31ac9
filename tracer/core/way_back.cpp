#include "tracer/core/way_back.hpp"

#include <elf.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <span>
#include <vector>

#include "breakpoint/x86/tracee_memory.hpp"
#include "common/error.hpp"
#include "common/fd.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost::way_back {

namespace {

// The kernel's struct sigcontext (x86-64) and struct ucontext, as rt_sigreturn reads them.
struct Sigcontext {
  std::uint64_t r8, r9, r10, r11, r12, r13, r14, r15;
  std::uint64_t rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags;
  std::uint16_t cs, gs, fs, ss;
  std::uint64_t err, trapno, oldmask, cr2;
  std::uint64_t fpstate;
  std::uint64_t reserved1[8];
};
static_assert(sizeof(Sigcontext) == 256);
struct Ucontext {
  std::uint64_t uc_flags, uc_link;
  std::uint64_t ss_sp;
  std::int32_t ss_flags, pad;
  std::uint64_t ss_size;
  Sigcontext mcontext;
  std::uint64_t sigmask;
};
static_assert(sizeof(Ucontext) == 304);

constexpr std::uint64_t kUcFpXstate = 0x1, kUcSigcontextSs = 0x2, kUcStrictRestoreSs = 0x4;
constexpr std::uint64_t kTrapFlag = 0x100;
constexpr std::uint32_t kFpXstateMagic1 = 0x46505853, kFpXstateMagic2 = 0x46505845;
constexpr std::size_t kSwReserved = 464;  // of the 512-byte FXSAVE area
// Below the red zone and what other injections put there (sigtrap_disposition's buffer,
// inject_call's frame and the function's stack).
constexpr std::uint64_t kGap = 128 + 4096;
constexpr std::uint64_t kSigframeSize = 8 + sizeof(Ucontext) + 128;  // pretcode, uc, siginfo

std::vector<std::uint8_t> read_mapping(TraceeMemory& memory, const Mapping& m) {
  std::vector<std::uint8_t> code(static_cast<std::size_t>(m.end - m.start));
  memory.read(m.start, code);
  return code;
}

// `syscall; leave`, then only `xor r32,r32` (31 /r or 45 31 /r, register operands), `ret`.
std::optional<std::size_t> syscall_leave_ret(const std::vector<std::uint8_t>& c) {
  for (std::size_t i = 0; i + 3 < c.size(); ++i) {
    if (c[i] != 0x0f || c[i + 1] != 0x05 || c[i + 2] != 0xc9) continue;
    for (std::size_t j = i + 3; j < c.size() && j < i + 64;) {
      if (c[j] == 0xc3) return i;
      if (c[j] == 0x31 && j + 1 < c.size() && c[j + 1] >= 0xc0) {
        j += 2;
      } else if (c[j] == 0x45 && j + 2 < c.size() && c[j + 1] == 0x31 && c[j + 2] >= 0xc0) {
        j += 3;
      } else {
        break;
      }
    }
  }
  return std::nullopt;
}

constexpr std::array<std::uint8_t, 9> kRestoreRt = {0x48, 0xc7, 0xc0, 0x0f, 0x00,
                                                    0x00, 0x00, 0x0f, 0x05};

// The first offset of `needle` in `size` bytes that `read(offset, buffer)` gives a chunk at a
// time (64 KiB, overlapping by the needle's length less one), so that a search that finds it
// early reads no further: __restore_rt lies 90 KB into libc's 1.4 MB of code here.
template <typename Read>
std::optional<std::size_t> find_in_chunks(std::uint64_t size, std::span<const std::uint8_t> needle,
                                          Read read) {
  constexpr std::size_t kChunk = 64 * 1024;
  std::vector<std::uint8_t> buf(kChunk);
  for (std::uint64_t off = 0; off < size; off += kChunk - (needle.size() - 1)) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, size - off));
    if (!read(off, std::span(buf.data(), n))) return std::nullopt;
    if (const void* at = ::memmem(buf.data(), n, needle.data(), needle.size()))
      return off + static_cast<std::size_t>(static_cast<const std::uint8_t*>(at) - buf.data());
    if (off + n >= size) break;
  }
  return std::nullopt;
}

// __restore_rt in an executable file mapping. Looked for in the mapped file (from the page
// cache), then its 9 bytes checked in the process: a copy of the whole mapping through the
// process's memory (access_remote_vm, a page at a time), then searched, took 4 to 7 ms of an
// attach's hold here. The process's own bytes are the fallback.
std::optional<RuntimeAddr> restore_rt_in(TraceeMemory& memory, pid_t pid, const Mapping& m) {
  const auto size = static_cast<std::uint64_t>(m.end - m.start);
  if (Fd fd(open_mapped_file(pid, m)); fd) {
    auto at = find_in_chunks(size, kRestoreRt, [&](std::uint64_t off, std::span<std::uint8_t> b) {
      return ::pread(fd.get(), b.data(), b.size(), static_cast<off_t>(m.offset + off)) ==
             static_cast<ssize_t>(b.size());
    });
    if (at) {
      RuntimeAddr found = m.start + static_cast<std::int64_t>(*at);
      std::array<std::uint8_t, kRestoreRt.size()> now{};
      memory.read(found, now);
      if (now == kRestoreRt) return found;
    }
  }
  auto at = find_in_chunks(size, kRestoreRt, [&](std::uint64_t off, std::span<std::uint8_t> b) {
    memory.read(m.start + static_cast<std::int64_t>(off), b);
    return true;
  });
  if (!at) return std::nullopt;
  return m.start + static_cast<std::int64_t>(*at);
}

bool is_libc(const Mapping& m) {
  auto slash = m.path.rfind('/');
  return m.path.compare(slash == std::string::npos ? 0 : slash + 1, 5, "libc.") == 0 ||
         m.path.compare(slash == std::string::npos ? 0 : slash + 1, 5, "libc-") == 0;
}

// The thread's FPU state in the XSAVE layout of a signal frame; nothing when it cannot be
// read. PTRACE_GETREGSET gives the XSAVE area with XCR0 where a frame has its software bytes
// (struct _fpx_sw_bytes: magic, sizes, features), which rt_sigreturn checks: without them it
// would restore the FXSAVE part alone (and reset the AVX state).
std::optional<std::vector<std::uint8_t>> xstate_of(pid_t tid) {
  std::vector<std::uint8_t> buf(16384);
  iovec iov{buf.data(), buf.size()};
  if (sys::ptrace_call(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) != 0)
    return std::nullopt;
  if (iov.iov_len < 512 + 64) return std::nullopt;
  buf.resize(iov.iov_len + 4);
  auto size = static_cast<std::uint32_t>(iov.iov_len);
  std::uint64_t xcr0 = 0;
  std::memcpy(&xcr0, buf.data() + kSwReserved, sizeof xcr0);
  struct {
    std::uint32_t magic1, extended_size;
    std::uint64_t xfeatures;
    std::uint32_t xstate_size, padding[7];
  } sw = {kFpXstateMagic1, size + 4, xcr0, size, {}};
  static_assert(sizeof sw == 48);
  std::memcpy(buf.data() + kSwReserved, &sw, sizeof sw);
  std::memcpy(buf.data() + size, &kFpXstateMagic2, 4);
  return buf;
}

// The registers the thread resumes with: `saved`, and the system call it was interrupted in
// restarted as the kernel restarts it on a resume with no handler to run.
Sigcontext context_of(const user_regs_struct& r) {
  Sigcontext sc{};
  sc.r8 = r.r8, sc.r9 = r.r9, sc.r10 = r.r10, sc.r11 = r.r11;
  sc.r12 = r.r12, sc.r13 = r.r13, sc.r14 = r.r14, sc.r15 = r.r15;
  sc.rdi = r.rdi, sc.rsi = r.rsi, sc.rbp = r.rbp, sc.rbx = r.rbx;
  sc.rdx = r.rdx, sc.rax = r.rax, sc.rcx = r.rcx, sc.rsp = r.rsp, sc.rip = r.rip;
  sc.eflags = r.eflags & ~kTrapFlag;
  sc.cs = static_cast<std::uint16_t>(r.cs);
  sc.ss = static_cast<std::uint16_t>(r.ss);
  auto error = static_cast<long>(r.rax);
  // -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK (the last from its
  // start: rt_sigreturn sets restart_syscall's state to "return EINTR").
  bool restart = error == -512 || error == -513 || error == -514 || error == -516;
  if (static_cast<long>(r.orig_rax) >= 0 && restart) {
    sc.rax = r.orig_rax;
    sc.rip = r.rip - 2;
  }
  return sc;
}

}  // namespace

std::optional<Gadgets> find_gadgets(TraceeMemory& memory, pid_t pid, std::vector<Mapping> maps) {
  std::optional<RuntimeAddr> leave_ret, rt;
  // libc first: a program's own copy of the bytes would do too, but it is rarely there.
  std::stable_partition(maps.begin(), maps.end(), [](const Mapping& m) { return is_libc(m); });
  try {
    for (const Mapping& m : maps) {
      if (!m.exec) continue;
      if (m.path == "[vdso]") {
        if (auto at = syscall_leave_ret(read_mapping(memory, m)))
          leave_ret = m.start + static_cast<std::int64_t>(*at);
      } else if (!rt && !m.path.empty() && m.path[0] == '/') {
        rt = restore_rt_in(memory, pid, m);
      }
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  if (!leave_ret || !rt) return std::nullopt;
  return Gadgets{*leave_ret, *rt};
}

std::optional<Frame> write_frame(pid_t tid, const user_regs_struct& saved, std::uint64_t mask,
                                 const Gadgets& gadgets, std::uint64_t below) {
  auto xstate = xstate_of(tid);
  if (!xstate) return std::nullopt;
  // RBP -> [saved RBP][pretcode = __restore_rt][ucontext][siginfo] ... [XSAVE area, 64-aligned]
  std::uint64_t fp_offset = (16 + kSigframeSize + 63) & ~std::uint64_t{63};
  std::uint64_t size = fp_offset + xstate->size();
  std::uint64_t frame = (saved.rsp - kGap - size) & ~std::uint64_t{63};
  Frame f{RuntimeAddr(frame), RuntimeAddr(frame - below), std::vector<std::uint8_t>(below + size)};
  if (sys::vm_read(tid, f.before.data(), f.before.size(), f.low.value(), 1) !=
      static_cast<ssize_t>(f.before.size()))
    return std::nullopt;                       // no room: not memory the thread can read
  std::vector<std::uint8_t> bytes = f.before;  // the call's stack as it was, then the frame
  std::uint8_t* at = bytes.data() + below;
  std::uint64_t words[2] = {saved.rbp, gadgets.restore_rt.value()};
  std::memcpy(at, words, sizeof words);
  Ucontext uc{};
  uc.uc_flags = kUcFpXstate | kUcSigcontextSs | kUcStrictRestoreSs;
  uc.ss_flags = 3;  // neither 0, SS_ONSTACK nor SS_DISABLE: the altstack is left alone
  uc.mcontext = context_of(saved);
  uc.mcontext.fpstate = frame + fp_offset;
  uc.sigmask = mask;
  std::memcpy(at + 16, &uc, sizeof uc);
  std::memcpy(at + fp_offset, xstate->data(), xstate->size());
  if (sys::vm_write(tid, bytes.data(), bytes.size(), f.low.value()) !=
      static_cast<ssize_t>(bytes.size())) {
    put_back(tid, f);     // a write stopped part way
    return std::nullopt;  // no room: not memory the thread can write
  }
  return f;
}

std::optional<std::vector<std::uint8_t>> fpu_state(pid_t tid) {
  std::vector<std::uint8_t> buf(16384);
  iovec iov{buf.data(), buf.size()};
  if (sys::ptrace_call(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) != 0)
    return std::nullopt;
  buf.resize(iov.iov_len);
  return buf;
}

bool set_fpu_state(pid_t tid, std::optional<std::vector<std::uint8_t>> state) {
  if (!state) return true;
  iovec iov{state->data(), state->size()};
  return sys::ptrace_call(PTRACE_SETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &iov) == 0;
}

bool injected_code_faulted(pid_t tid, int sig) {
  if (sig != SIGSEGV && sig != SIGBUS && sig != SIGILL && sig != SIGFPE) return false;
  siginfo_t info{};
  return sys::ptrace_call(PTRACE_GETSIGINFO, tid, nullptr, &info) == 0 && info.si_code > 0;
}

bool put_back(pid_t tid, const Frame& frame) {
  return sys::vm_write(tid, frame.before.data(), frame.before.size(), frame.low.value()) ==
         static_cast<ssize_t>(frame.before.size());
}

}  // namespace probecost::way_back
