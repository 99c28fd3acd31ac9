#pragma once
// glibc's rseq registration in a tracee, which the per-CPU trampolines (counting, call records)
// rely on: since glibc 2.35 every thread it makes registers a struct rseq at the same offset from
// its thread pointer (__rseq_offset), with the signature RSEQ_SIG that the trampolines' abort
// handlers carry. A process without it (glibc older than 2.35, GLIBC_TUNABLES=
// glibc.pthread.rseq=0, a static binary of another libc) gets locked increments, or int3 call
// probes.
#include <cstdint>
#include <optional>
#include <string>

namespace probecost {

class Task;

struct RseqRegistration {
  std::int32_t offset = 0;  // of struct rseq from the thread pointer (glibc's __rseq_offset)
  std::uint32_t cpus = 0;   // possible CPUs: every cpu_id the kernel can write is below
};

// The registration of a stopped thread, from PTRACE_GET_RSEQ_CONFIGURATION (Linux 5.13): its
// struct rseq less its fs_base. Nothing, with the reason in `why`, when it has none this
// probecost can use.
std::optional<RseqRegistration> rseq_registration(Task& task, std::string& why);

// The possible CPUs (/sys/devices/system/cpu/possible: "0-63"): the kernel's nr_cpu_ids.
std::uint32_t possible_cpus();

}  // namespace probecost
