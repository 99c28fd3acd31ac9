// A thread parked in read() on a small stack of the program's own (a makecontext coroutine),
// with memory of the program's right below that stack: an injected call must neither write
// there nor run its code off the stack's end (tests/trace/test_way_back_room.cpp).
// usage: small_stack heap|guard SIZE DEPTH
//   heap:  the stack is the top of a malloc'd block whose lower 64 KiB is the program's data
//   guard: [data 64 KiB][guard page, PROT_NONE][stack], as a thread stack below another's
//   DEPTH: bytes of the stack used before the read (the read's RSP that far from the top)
// Prints "ready", reads a line on the coroutine, then prints "changed=N" (bytes of the data
// under the stack not as written) and exits 0.
#include <alloca.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

ucontext_t main_ctx, coro_ctx;
std::size_t depth;
volatile long got;

void coro() {
  volatile char* used = static_cast<char*>(alloca(depth + 16));
  for (std::size_t i = 0; i < depth + 16; i += 64) used[i] = 1;
  char c = 0;
  got = ::read(0, &c, 1);
  used[1] = c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  std::size_t size = std::strtoul(argv[2], nullptr, 0);
  depth = std::strtoul(argv[3], nullptr, 0);
  constexpr std::size_t kData = 64 * 1024;
  unsigned char* data;
  unsigned char* stack;
  if (std::strcmp(argv[1], "heap") == 0) {
    data = static_cast<unsigned char*>(std::malloc(kData + size));
    stack = data + kData;
  } else {
    void* r = ::mmap(nullptr, kData + 4096 + size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return 2;
    data = static_cast<unsigned char*>(r);
    if (::mprotect(data + kData, 4096, PROT_NONE) != 0) return 2;
    stack = data + kData + 4096;
  }
  std::memset(data, 0xa5, kData);
  getcontext(&coro_ctx);
  coro_ctx.uc_stack.ss_sp = stack;
  coro_ctx.uc_stack.ss_size = size;
  coro_ctx.uc_link = &main_ctx;
  makecontext(&coro_ctx, coro, 0);
  std::printf("ready\n");
  std::fflush(stdout);
  swapcontext(&main_ctx, &coro_ctx);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < kData; ++i) changed += data[i] != 0xa5;
  std::printf("changed=%zu read=%ld\n", changed, static_cast<long>(got));
  return 0;
}
