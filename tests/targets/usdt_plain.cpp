// probecost_test:plain, a USDT marker without a semaphore (its own file: <sys/sdt.h> gives
// every marker of a file a semaphore, or none).
#include <sys/sdt.h>

__attribute__((noinline)) void probecost_usdt_plain_one(long* count) {
  DTRACE_PROBE(probecost_test, plain);
  ++*count;
}
