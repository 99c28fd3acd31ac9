// The uprobe PMU, where a uprobe goes, how the kernel treats the probed instruction, and the
// counting events.
#include "uprobe/uprobe.hpp"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "breakpoint/x86/decoder.hpp"
#include "common/error.hpp"
#include "tracer/os/maps.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

UprobePmu uprobe_pmu() {
  UprobePmu pmu;
  const char* path = "/sys/bus/event_source/devices/uprobe/type";
  std::ifstream in(path);
  if (!(in >> pmu.type)) {
    pmu.type = -1;
    pmu.unavailable = std::string("this kernel has no uprobe PMU (") + path +
                      " is missing: CONFIG_UPROBE_EVENTS off, or not Linux 4.17+)";
  }
  return pmu;
}

namespace {

// x86_nops[len] of arch/x86/kernel/alternative.c, the NOPs branch_setup_xol_ops emulates
// "as jmp with .offs = 0".
bool kernel_nop(std::span<const std::uint8_t> b, std::size_t len) {
  static const std::uint8_t nops[][8] = {
      {},
      {0x90},
      {0x66, 0x90},
      {0x0f, 0x1f, 0x00},
      {0x0f, 0x1f, 0x40, 0x00},
      {0x0f, 0x1f, 0x44, 0x00, 0x00},
      {0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00},
      {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00},
      {0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
  };
  return len >= 1 && len <= 8 && b.size() >= len && std::memcmp(b.data(), nops[len], len) == 0;
}

// is_prefix_bad() of arch/x86/kernel/uprobes.c: LOCK, or a segment override other than FS and
// GS.
bool bad_prefix(std::span<const std::uint8_t> b, std::size_t len) {
  for (std::size_t i = 0; i < len && i < b.size(); ++i) {
    std::uint8_t p = b[i];
    if (p == 0x26 || p == 0x2e || p == 0x36 || p == 0x3e || p == 0xf0) return true;
    bool prefix = p == 0x64 || p == 0x65 || p == 0x66 || p == 0x67 || p == 0xf2 || p == 0xf3 ||
                  (p >= 0x40 && p <= 0x4f);
    if (!prefix) return false;
  }
  return false;
}

// A VEX (c4, c5) or EVEX (62) encoded instruction, after any legacy prefixes.
bool vector_encoded(std::span<const std::uint8_t> b, std::size_t len) {
  for (std::size_t i = 0; i < len && i < b.size(); ++i) {
    std::uint8_t p = b[i];
    if (p == 0xc4 || p == 0xc5 || p == 0x62) return true;
    if (p != 0x66 && p != 0x67 && p != 0xf2 && p != 0xf3 && p != 0x64 && p != 0x65) return false;
  }
  return false;
}

// push_setup_xol_ops: push r64, with or without REX.B (0x41).
bool push_reg(std::span<const std::uint8_t> b) {
  std::size_t i = (b.size() > 1 && b[0] == 0x41) ? 1 : 0;
  return b.size() > i && b[i] >= 0x50 && b[i] <= 0x57;
}

}  // namespace

UprobeHandling uprobe_handling(std::span<const std::uint8_t> bytes, RuntimeAddr at) {
  UprobeHandling h;
  auto insn = decode(bytes, at);
  if (!insn) {
    h.instruction = "(undecodable)";
    h.how = "the first instruction does not decode";
    h.single_stepped = true;
    return h;
  }
  h.instruction = insn->text();
  std::uint64_t page_offset = at.value() & 0xfff;
  if (bad_prefix(bytes, insn->length)) {
    h.count_differs = "the kernel refuses a uprobe on an instruction with a LOCK or segment prefix";
  } else if (insn->rep) {
    h.count_differs = "the kernel's uprobe counts every iteration of a rep string instruction";
  }
  if (insn->text().rfind("pushf", 0) == 0) {
    h.harms = "single-stepped out of line, pushf pushes the step's trap flag";
  } else if (vector_encoded(bytes, insn->length)) {
    h.harms = "stepped out of line, some VEX and EVEX instructions see zeroed vector registers";
  }
  if (insn->length == 5 && kernel_nop(bytes, 5) && page_offset <= 4096 - 5) {
    h.harms = "the 5-byte NOP becomes a call, which writes the red zone";
    h.how =
        "5-byte NOP: emulated on the first hit, then rewritten into a call to the uprobe "
        "trampoline (uprobe syscall, no trap) where the kernel optimises uprobes (x86-64, "
        "6.18+)";
  } else if (kernel_nop(bytes, insn->length)) {
    h.how = "NOP: emulated (branch_setup_xol_ops), one trap per hit";
  } else if (push_reg(bytes)) {
    h.how = "push: emulated on the saved registers (push_setup_xol_ops), one trap per hit";
  } else if (insn->kind == Instruction::Kind::JmpRel || insn->kind == Instruction::Kind::CallRel ||
             insn->kind == Instruction::Kind::Jcc) {
    h.how = "relative branch: emulated (branch_setup_xol_ops), one trap per hit";
  } else {
    h.how = "single-stepped out of line from the [uprobes] page: two traps per hit";
    h.single_stepped = true;
  }
  return h;
}

std::string uprobe_refusal(int err) {
  std::string why = std::strerror(err);
  if (err == EACCES || err == EPERM) {
    return "perf_event_open refused the uprobe PMU (" + why +
           "): it needs CAP_PERFMON or CAP_SYS_ADMIN";
  }
  return "perf_event_open refused the uprobe (" + why + ")";
}

UprobeTarget locate_uprobe_target(pid_t pid, const std::string& symbol) {
  Symbol sym = ProcessSymbols(pid).resolve(symbol);
  for (const Mapping& m : read_maps(pid)) {
    if (m.contains(sym.address) && !m.path.empty()) {
      return {m.path, static_cast<std::uint64_t>(sym.address - m.start) + m.offset, sym.address,
              sym.size};
    }
  }
  throw Error("no file mapping holds " + symbol + " at " + sym.address.hex());
}

int UprobeCounters::open(int type, const std::string& path, std::uint64_t offset, pid_t tid,
                         int cpu) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = static_cast<std::uint32_t>(type);
  attr.config1 = reinterpret_cast<std::uint64_t>(path.c_str());  // uprobe_path
  attr.config2 = offset;                                         // probe_offset
  long fd = ::syscall(SYS_perf_event_open, &attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) return -errno;
  fds_.emplace_back(static_cast<int>(fd));
  return static_cast<int>(fd);
}

std::uint64_t UprobeCounters::read(int fd) {
  std::uint64_t count = 0;
  if (::read(fd, &count, sizeof count) != sizeof count) throw Error::from_errno("perf read");
  return count;
}

std::uint64_t UprobeCounters::total() const {
  std::uint64_t n = 0;
  for (const Fd& fd : fds_) n += read(fd.get());
  return n;
}

}  // namespace probecost
