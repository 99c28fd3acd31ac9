#include "tracer/int3/trap_handler_state.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/user.h>

#include <cstddef>
#include <cstring>

#include "tracer/os/memory.hpp"
#include "tracer/os/remote_process.hpp"

namespace probecost {

std::optional<trap::KernelSigaction> sigtrap_disposition(RemoteProcess& proc) {
  auto t = proc.call_thread();
  if (!t) return std::nullopt;
  // Below the red zone, where a signal frame could go: nothing of the thread's is there.
  RuntimeAddr old((t->rsp - 128 - 64) & ~std::uint64_t{15});
  auto r = proc.remote_syscall(SYS_rt_sigaction,
                               {SIGTRAP, 0, static_cast<long>(old.value()), 8, 0, 0}, t->tid);
  if (!r || *r != 0) return std::nullopt;
  trap::KernelSigaction k;
  proc.memory().read(old, {reinterpret_cast<std::uint8_t*>(&k), sizeof k});
  return k;
}

bool set_sigtrap_disposition(RemoteProcess& proc, RuntimeAddr act) {
  auto r =
      proc.remote_syscall(SYS_rt_sigaction, {SIGTRAP, static_cast<long>(act.value()), 0, 8, 0, 0});
  return r && *r == 0;
}

bool put_back_disposition(RemoteProcess& proc, RuntimeAddr area) {
  if (!set_sigtrap_disposition(proc, area + offsetof(trap::TrapHeader, program))) return false;
  auto state = static_cast<std::uint32_t>(trap::HandlerState::PutBack);
  proc.memory().write(area + offsetof(trap::TrapHeader, handler_state),
                      {reinterpret_cast<const std::uint8_t*>(&state), sizeof state});
  return true;
}

}  // namespace probecost
