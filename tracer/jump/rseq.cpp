#include "tracer/jump/rseq.hpp"

#include <sys/ptrace.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "tracer/core/task.hpp"
#include "tracer/os/syscalls.hpp"

namespace probecost {

namespace {

constexpr std::uint32_t kRseqSig = 0x53053053;  // glibc's RSEQ_SIG on x86, in our abort handlers
constexpr std::uint32_t kRseqFields = 20;       // cpu_id_start, cpu_id, rseq_cs (what we use)

}  // namespace

std::optional<RseqRegistration> rseq_registration(Task& task, std::string& why) {
  __ptrace_rseq_configuration conf{};
  if (sys::ptrace_call(PTRACE_GET_RSEQ_CONFIGURATION, task.tid(),
                       reinterpret_cast<void*>(sizeof conf), &conf) < 0) {
    why = std::string("PTRACE_GET_RSEQ_CONFIGURATION: ") + std::strerror(errno);
    return std::nullopt;
  }
  const user_regs_struct* regs = task.regs();
  if (!regs) {
    why = "the thread is gone";
    return std::nullopt;
  }
  if (!conf.rseq_abi_pointer || conf.rseq_abi_size < kRseqFields) {
    why =
        "its threads have no rseq registration (glibc older than 2.35, or "
        "glibc.pthread.rseq=0)";
    return std::nullopt;
  }
  if (conf.signature != kRseqSig) {
    why = "its rseq signature is not glibc's";
    return std::nullopt;
  }
  auto offset = static_cast<std::int64_t>(conf.rseq_abi_pointer - regs->fs_base);
  if (offset < INT32_MIN + 64 || offset > INT32_MAX - 64) {
    why = "its struct rseq is not at glibc's place, near the thread pointer";
    return std::nullopt;
  }
  return RseqRegistration{static_cast<std::int32_t>(offset), possible_cpus()};
}

std::uint32_t possible_cpus() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string ranges;
  std::uint32_t last = 0;
  if (std::getline(in, ranges)) {
    // "0-63" or "0,2-5": the highest number is the last one's.
    auto cut = ranges.find_last_of(",-");
    last = static_cast<std::uint32_t>(
        std::strtoul(ranges.c_str() + (cut == std::string::npos ? 0 : cut + 1), nullptr, 10));
    return last + 1;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace probecost
