// A shared library whose SONAME (libprobecost_soname.so.1) is not its file name
// (libprobecost_soname.so.1.2.3), as most distributions' libraries: a probe may name it either way.
#include <cstdint>

extern "C" __attribute__((noipa, visibility("default"))) std::uint64_t probecost_soname_site(
    std::uint64_t i) {
  asm volatile("" ::"r"(i));
  return i + 1;
}
