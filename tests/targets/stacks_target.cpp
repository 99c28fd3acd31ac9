// Issue 26's tracee: one probed function, stack_leaf, reached by call paths of known counts:
// main -> path_a (3), main -> path_b (5), main -> path_c -> path_b (7), qsort (libc.so.6) ->
// compare -> stack_leaf (once per comparison, counted by the program), and a second thread
// -> path_a (4). Prints the counts it made, so a test compares them with the stacks traced.
//   stacks_target slots: 12 threads one after the other, each on a stack of its own mapped
//   4 GiB from the last (so their thread pointers all hash to one slot of a jump probe's thread
//   table, which holds 8), each calling path_a once: the 9th on finds a slot only if the
//   exited threads' entries were freed.
//   stacks_target dlopen PATH: dlopens PATH (stacks_lib.cpp) and calls stack_leaf through its
//   stacks_lib_call 5 times: a frame in a library mapped after the probes went in.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

extern "C" {
volatile int g_sink;
__attribute__((noinline)) int stack_leaf(int x) {
  g_sink = x;  // long enough for a jump: a store, then the arithmetic
  asm volatile("" ::: "memory");
  return g_sink * 3 + 1;
}
__attribute__((noinline)) int path_a(int x) {
  int r = stack_leaf(x);
  asm volatile("" ::: "memory");
  return r + 1;
}
__attribute__((noinline)) int path_b(int x) {
  int r = stack_leaf(x + 1);
  asm volatile("" ::: "memory");
  return r + 2;
}
__attribute__((noinline)) int path_c(int x) {
  int r = path_b(x + 2);
  asm volatile("" ::: "memory");
  return r + 3;
}
}

static int g_compares = 0;

static int compare(const void* a, const void* b) {
  ++g_compares;
  int x = *static_cast<const int*>(a), y = *static_cast<const int*>(b);
  return stack_leaf(x) < stack_leaf(y) ? -1 : x == y ? 0 : 1;
}

static void* thread_one(void*) {
  return reinterpret_cast<void*>(static_cast<long>(path_a(1)));
}

static void* thread_main(void*) {
  int s = 0;
  for (int i = 0; i < 4; ++i) s += path_a(i);
  return reinterpret_cast<void*>(static_cast<long>(s));
}

static int threads_on_own_stacks() {
  constexpr std::size_t kSize = 1 << 20;
  constexpr int kThreads = 12;
  int made = 0;
  for (int i = 0; i < kThreads; ++i) {
    auto hint =
        reinterpret_cast<void*>(0x100000000000ull + (static_cast<unsigned long long>(i) << 32));
    void* stack = mmap(hint, kSize, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (stack == MAP_FAILED || stack != hint) return 1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, kSize);
    pthread_t t;
    if (pthread_create(&t, &attr, thread_one, nullptr) != 0) return 1;
    pthread_join(t, nullptr);
    pthread_attr_destroy(&attr);
    munmap(stack, kSize);
    ++made;
  }
  std::printf("slots threads=%d leaf=%d\n", made, made);
  return 0;
}

static int through_a_library(const char* path) {
  void* lib = dlopen(path, RTLD_NOW);
  if (!lib) return 1;
  auto call = reinterpret_cast<int (*)(int (*)(int), int)>(dlsym(lib, "stacks_lib_call"));
  if (!call) return 1;
  int s = 0;
  for (int i = 0; i < 5; ++i) s += call(stack_leaf, i);
  std::printf("dlopen lib=5 leaf=5 sum=%d\n", s);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "slots") return threads_on_own_stacks();
  if (argc > 2 && std::string_view(argv[1]) == "dlopen") return through_a_library(argv[2]);
  int s = 0;
  for (int i = 0; i < 3; ++i) s += path_a(i);
  for (int i = 0; i < 5; ++i) s += path_b(i);
  for (int i = 0; i < 7; ++i) s += path_c(i);
  int v[8] = {5, 3, 7, 1, 8, 2, 6, 4};
  qsort(v, 8, sizeof v[0], compare);
  pthread_t t;
  pthread_create(&t, nullptr, thread_main, nullptr);
  pthread_join(t, nullptr);
  std::printf("a=3 b=5 c=7 qsort=%d thread=4 leaf=%d sum=%d\n", 2 * g_compares,
              3 + 5 + 7 + 2 * g_compares + 4, s);
  return 0;
}
