#pragma once
// STT_GNU_IFUNC symbols (strlen, memcpy, strcmp, memset and some 55 more in glibc): the
// symbol's value is a resolver that the dynamic loader calls once, at relocation or at the
// first call through a lazy PLT slot, and every call goes to the function it returned
// (__strlen_evex on one CPU, __strlen_avx2 on another). A probe at the symbol's value would sit
// in the resolver, which never runs again. We probe the function the process uses, found as
// GDB finds it (elf_gnu_ifunc_resolve_by_got, then a call of the resolver in the inferior):
//   1. a relocated slot that holds it: the defining module's R_X86_64_IRELATIVE slots (libc's
//      own calls to strlen go through one, relocated at load time), or a bound JUMP_SLOT or
//      GLOB_DAT of the executable or another library;
//   2. else the resolver itself, called in a stopped thread of the tracee. x86-64 resolvers
//      take no argument that matters: glibc's elf_ifunc_invoke (sysdeps/x86_64/dl-irel.h)
//      calls them with none, and they read the CPU features that ld.so recorded
//      (init-arch.h, __x86_get_cpu_features).
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "breakpoint/x86/tracee_memory.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost {

struct IfuncTarget {
  RuntimeAddr address;      // the implementation
  std::string name;         // its name ("__strlen_evex"); empty when no symbol names it
  std::string resolved_by;  // how we know: "IRELATIVE slot 0x7f.. of libc.so.6", ...
};

// Runs the resolver at `resolver` in the tracee and returns what it returned (RAX); nothing
// when no thread can run it now.
using ResolverCall = std::function<std::optional<std::uint64_t>(RuntimeAddr resolver)>;

// The implementation `ifunc` resolves to in process `pid`. Error when neither a slot nor a
// call of the resolver (`call`, when given) tells.
IfuncTarget resolve_ifunc(const Symbol& ifunc, const ProcessSymbols& symbols, TraceeMemory& memory,
                          const ResolverCall& call, pid_t pid);

}  // namespace probecost
