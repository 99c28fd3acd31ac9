#include "tracer/core/clone_args.hpp"

#include <linux/sched.h>
#include <sys/syscall.h>

#include <span>

#include "common/error.hpp"

namespace probecost {

namespace {

std::optional<clone_args> clone3_args(TraceeMemory& memory, const user_regs_struct& r) {
  clone_args args{};
  try {
    memory.read(RuntimeAddr(r.rdi),
                std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&args), sizeof args));
  } catch (const Error&) {
    return std::nullopt;
  }
  return args;
}

}  // namespace

std::optional<std::uint64_t> child_thread_pointer(TraceeMemory& memory,
                                                  const user_regs_struct* parent) {
  if (!parent) return std::nullopt;
  const user_regs_struct& r = *parent;
  if (r.orig_rax == SYS_clone) return (r.rdi & CLONE_SETTLS) ? r.r8 : r.fs_base;
  if (r.orig_rax == SYS_clone3) {
    auto args = clone3_args(memory, r);
    if (!args) return std::nullopt;
    return (args->flags & CLONE_SETTLS) ? args->tls : r.fs_base;
  }
  return r.fs_base;
}

std::uint64_t child_stack(TraceeMemory& memory, const user_regs_struct* parent) {
  if (!parent) return 0;
  if (parent->orig_rax == SYS_clone) return parent->rsi;
  if (parent->orig_rax != SYS_clone3) return 0;
  auto args = clone3_args(memory, *parent);
  return args && args->stack ? args->stack + args->stack_size : 0;
}

}  // namespace probecost
