// Built with -O0 (see tests/CMakeLists.txt): the landing pad of the catch follows the try block's
// `jmp` in the function's own body, where a jump patch planned over the jmp would cover it.
// At -O2 the pad moves to .cold.
#include <cstdint>

std::uint64_t g_awkward_caught = 0;

extern "C" __attribute__((noinline)) int awkward_catch(int i) {
  int r = 0;
  try {
    if (i % 3 == 0) throw i;
    r = i;
  } catch (int e) {
    ++g_awkward_caught;
    r = -e;
  }
  return r;
}
