#include "tracer/core/left_loops.hpp"

#include <sys/user.h>

#include <array>
#include <cstring>

#include "breakpoint/in_tracee/warm_loop.hpp"
#include "common/error.hpp"
#include "tracer/core/process.hpp"

namespace probecost {

namespace {

// libc's __restore_rt: `mov $15,%rax; syscall` (tracer/core/way_back.cpp finds the same).
constexpr std::array<std::uint8_t, 9> kRestoreRt = {0x48, 0xc7, 0xc0, 0x0f, 0x00,
                                                    0x00, 0x00, 0x0f, 0x05};

template <typename T>
T read_as(TraceeMemory& memory, RuntimeAddr at) {
  T value{};
  memory.read(at, {reinterpret_cast<std::uint8_t*>(&value), sizeof value});
  return value;
}

// The registers thread `t` resumes with to finish its way back, if it is in a warm loop of
// ours whose frame leads to __restore_rt; nothing otherwise (any read that fails included).
std::optional<user_regs_struct> rest_of_way(TraceeMemory& memory, const user_regs_struct& now) {
  warm::LoopStop stop{RuntimeAddr(now.rip & ~std::uint64_t{kPageSize - 1}), now.rip, now.rsp,
                      now.rbp};
  auto words_at = warm::words_at(stop);
  if (!words_at) return std::nullopt;
  std::array<std::uint8_t, warm::kCodeOffset + sizeof warm::kLoop> first{};
  memory.read(stop.page, first);
  if (!warm::is_warm_page(first, stop.page)) return std::nullopt;
  auto words = read_as<std::array<std::uint64_t, 2>>(memory, RuntimeAddr(*words_at));
  auto rest = warm::rest_of_way(stop, words);
  if (!rest || read_as<std::array<std::uint8_t, 9>>(memory, RuntimeAddr(rest->rip)) != kRestoreRt)
    return std::nullopt;
  user_regs_struct regs = now;
  regs.rip = rest->rip;
  regs.rsp = rest->rsp;
  regs.rbp = rest->rbp;
  regs.orig_rax = static_cast<unsigned long long>(-1);  // no system call to restart here
  return regs;
}

}  // namespace

std::vector<std::string> finish_left_way_backs(TracedProcess& proc) {
  std::vector<std::string> said;
  for (auto& [tid, t] : proc.threads()) {
    if (!t.stopped()) continue;
    const user_regs_struct* now = t.regs();
    if (!now) continue;
    try {
      auto regs = rest_of_way(proc.memory(), *now);
      if (!regs) continue;
      if (t.set_regs(*regs)) {
        said.push_back("thread " + std::to_string(tid) +
                       " was in the warm loop of a probecost killed during `record`: "
                       "sent on to its own registers (rt_sigreturn from its frame)");
      }
    } catch (const Error&) {
      // Its memory could not be read: not a loop of ours that we can vouch for.
    }
  }
  return said;
}

}  // namespace probecost
