// The library stacks_target dlopens (its `dlopen` mode): a frame in a module mapped after the
// trace started, between main and stack_leaf.
extern "C" __attribute__((noipa, visibility("default"))) int stacks_lib_call(int (*f)(int), int x) {
  int r = f(x + 1);
  asm volatile("" ::: "memory");
  return r + 1;
}
