#pragma once
// Where libdwfl finds the ELF files of a live process, and their separate debug files.
//
// A module whose file is no longer in the file system (an executable started from a memfd with
// fexecve, shown as "/memfd:NAME (deleted)"; a file deleted or replaced since it was mapped)
// is read through /proc/PID/exe or /proc/PID/map_files/START-END, which open the very file the
// process mapped. dwfl_linux_proc_find_elf would rebuild such an image from the process's
// memory instead (elf_from_remote_memory), where the section headers, and with them .symtab,
// are not loaded.
//
// Separate debug files (Debian's libc6-dbg: /usr/lib/debug/.build-id/...) are looked for on
// elfutils' default path, ":.debug:/usr/lib/debug", or on the one in the environment variable
// PROBECOST_DEBUGINFO_PATH (elfutils' syntax: directories separated by ':'). A directory with
// no debug files there makes probecost see a machine without them: the tests run both ways.
#include <elfutils/libdwfl.h>
#include <sys/types.h>

namespace probecost {

// For dwfl_linux_proc_report: call tag_modules_with_pid after it.
const Dwfl_Callbacks* process_callbacks();
// Tells each module of `dwfl` which process it was reported from (its libdwfl user data),
// for process_callbacks()' find_elf.
void tag_modules_with_pid(Dwfl* dwfl, pid_t pid);

// For one ELF image in memory: no file, no separate debug file is looked for.
const Dwfl_Callbacks* image_callbacks();

}  // namespace probecost
