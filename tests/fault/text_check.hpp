#pragma once
// Does a live process's code still equal its ELF files? Every executable, file-backed mapping
// of /proc/PID/maps is read through /proc/PID/mem and compared with the file's bytes at the
// mapping's offset: an int3 left behind by a tracer shows up as a difference.
#include <sys/types.h>

#include <string>
#include <vector>

namespace fault {

// One line per differing byte run ("fault_busy+0x1139: cc, file f3"), at most `limit` lines;
// empty when the text is the files'. A process that is gone gives no difference.
//
// A kernel uprobe (someone's bpftrace or perf on the same machine) writes its int3 into every
// process that maps the file, so it is not a trace left by probecost: a difference that the
// reference process (the caller, or its parent when the caller checks itself) shows too at
// the same file offset is left out, and counted in foreign_int3s().
std::vector<std::string> text_differences(pid_t pid, std::size_t limit = 8);

// How many differing bytes were left out so far because another process showed them too.
std::size_t foreign_int3s();

}  // namespace fault
