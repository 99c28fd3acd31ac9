// Issue 26's tracee: one probed function, stack_leaf, reached by call paths of known counts:
// main -> path_a (3), main -> path_b (5), main -> path_c -> path_b (7), qsort (libc.so.6) ->
// compare -> stack_leaf (once per comparison, counted by the program), and a second thread
// -> path_a (4). Prints the counts it made, so a test compares them with the stacks traced.
#include <pthread.h>

#include <cstdio>
#include <cstdlib>

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

static void* thread_main(void*) {
  int s = 0;
  for (int i = 0; i < 4; ++i) s += path_a(i);
  return reinterpret_cast<void*>(static_cast<long>(s));
}

int main() {
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
