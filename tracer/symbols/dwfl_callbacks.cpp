#include "tracer/symbols/dwfl_callbacks.hpp"

#include <elfutils/libdwfl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tracer/os/maps.hpp"

namespace probecost {

namespace {

char* debuginfo_path_from_environment() {
  return std::getenv("PROBECOST_DEBUGINFO_PATH");  // null: elfutils' default path
}

char** debuginfo_path() {
  static char* path = debuginfo_path_from_environment();
  return &path;
}

bool regular_file(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// The file the process mapped as `name` at `base` (the module's lowest address), through
// /proc/PID/exe or /proc/PID/map_files (open_mapped_file). -1 when neither opens.
int open_module_file(pid_t pid, const char* name, Dwarf_Addr base) {
  try {
    const Mapping* first = nullptr;
    auto maps = read_maps(pid);
    for (const auto& m : maps) {
      if (m.path != name) continue;
      if (!first || m.start.value() == base) first = &m;
      if (m.start.value() == base) break;
    }
    return first ? open_mapped_file(pid, *first) : -1;
  } catch (...) {
    return -1;  // the process is gone: no exception may cross libdwfl's C frames
  }
}

int find_process_elf(Dwfl_Module* mod, void** userdata, const char* name, Dwarf_Addr base,
                     char** file_name, Elf** elfp) {
  auto pid = static_cast<pid_t>(reinterpret_cast<std::intptr_t>(*userdata));
  if (pid > 0 && name && name[0] == '/' && !regular_file(name)) {
    int fd = open_module_file(pid, name, base);
    if (fd >= 0) {
      *file_name = ::strdup(name);
      return fd;
    }
  }
  return dwfl_linux_proc_find_elf(mod, userdata, name, base, file_name, elfp);
}

int no_debuginfo(Dwfl_Module*, void**, const char*, Dwarf_Addr, const char*, const char*, GElf_Word,
                 char**) {
  return -1;
}

}  // namespace

const Dwfl_Callbacks* process_callbacks() {
  static const Dwfl_Callbacks callbacks = {
      .find_elf = find_process_elf,
      .find_debuginfo = dwfl_standard_find_debuginfo,
      .section_address = nullptr,
      .debuginfo_path = debuginfo_path(),
  };
  return &callbacks;
}

void tag_modules_with_pid(Dwfl* dwfl, pid_t pid) {
  auto tag = [](Dwfl_Module*, void** userdata, const char*, Dwarf_Addr, void* arg) -> int {
    *userdata = arg;
    return DWARF_CB_OK;
  };
  dwfl_getmodules(dwfl, tag, reinterpret_cast<void*>(static_cast<std::intptr_t>(pid)), 0);
}

const Dwfl_Callbacks* image_callbacks() {
  static const Dwfl_Callbacks callbacks = {
      .find_elf = nullptr,
      .find_debuginfo = no_debuginfo,
      .section_address = dwfl_offline_section_address,
      .debuginfo_path = debuginfo_path(),
  };
  return &callbacks;
}

}  // namespace probecost
