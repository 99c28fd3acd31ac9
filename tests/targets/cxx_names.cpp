// A C++ tracee for probes by demangled name: overloads, a method and its const overload, two
// functions of one name in two namespaces, and a function of a library whose SONAME is not its
// file name (libprobecost_soname.so.1 -> libprobecost_soname.so.1.2.3).
//   cxx_names N
// Each function is called a fixed multiple of N times, counted by the program itself; prints
// one line of counts at the end, the same traced or not.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "inferior/sanitizer_options.hpp"

extern "C" std::uint64_t probecost_soname_site(std::uint64_t);

namespace {
std::uint64_t g_calls[8];
}  // namespace

// noipa: no inlining, no clones (.isra, .constprop): one symbol per function, called as written.
__attribute__((noipa)) long middle(long x) {
  ++g_calls[0];
  return x + 1;
}
__attribute__((noipa)) int middle(int x) {
  ++g_calls[1];
  return x + 2;
}
__attribute__((noipa)) double middle(double x) {
  ++g_calls[2];
  return x + 3;
}

namespace ns {
struct Klass {
  __attribute__((noipa)) long method(long x) {
    ++g_calls[3];
    return x * 2;
  }
  __attribute__((noipa)) long method() const {
    ++g_calls[4];
    return 7;
  }
};
}  // namespace ns

namespace a {
__attribute__((noipa)) void twin() {
  ++g_calls[5];
}
}  // namespace a
namespace b {
__attribute__((noipa)) void twin() {
  ++g_calls[6];
}
}  // namespace b

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cxx_names N\n");
    return 2;
  }
  long n = std::atol(argv[1]);
  ns::Klass k;
  long sum = 0;
  for (long i = 0; i < n; ++i) {
    sum += middle(i);
    for (int j = 0; j < 2; ++j) sum += middle(static_cast<int>(j));
    for (int j = 0; j < 3; ++j) sum += static_cast<long>(middle(1.0 * j));
    for (int j = 0; j < 4; ++j) sum += k.method(j);
    for (int j = 0; j < 5; ++j) sum += static_cast<const ns::Klass&>(k).method();
    for (int j = 0; j < 6; ++j) a::twin();
    for (int j = 0; j < 7; ++j) b::twin();
    for (int j = 0; j < 8; ++j) g_calls[7] += probecost_soname_site(j) != 0;
  }
  std::printf(
      "middle(long)=%lu middle(int)=%lu middle(double)=%lu method(long)=%lu "
      "method()=%lu a::twin=%lu b::twin=%lu soname=%lu sum=%ld\n",
      g_calls[0], g_calls[1], g_calls[2], g_calls[3], g_calls[4], g_calls[5], g_calls[6],
      g_calls[7], sum);
  return 0;
}
