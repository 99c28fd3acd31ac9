// A second shared library defining the same symbol as libserve_lib.so: a probe by bare name is
// ambiguous between the two (the executable defines neither).
#include <cstdint>

extern "C" __attribute__((noipa, visibility("default"))) void probecost_lib_site(std::uint64_t i) {
  asm volatile("" ::"r"(i));
}
