// Functions shorter than a jump (issue 23 item 1), called beside probe_fn, for `probecost
// record` launched and attached:
//   fault_short [--threads N] [--idle | --calls K] [--ctl-fd FD]
//   default   N threads (2) call every function without pause until "stop" (or EOF)
//   --idle    N threads wait; "go K" makes each call every function K times -> "done"
//   --calls K each of N threads calls every function K times, then the program ends
// Every result is checked (bad=). The end line adds each function's calls: short_ret1=...
// (short_lea4's count includes those through short_tail2, a tail call into it).
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "target_common.hpp"

// short_ret1: `ret`, called by call_ret1(x) with %rax = x. short_xchg2: `xchg %edi,%eax; ret`.
// short_tail2: `jmp short_lea4` (rel8). short_mov3: `mov %edi,%eax; ret`. short_lea4:
// `lea 1(%rdi),%eax; ret`. short_page_end: `mov %edi,%eax; ret`, ending at a page's end.
asm(R"(
  .text
  .globl call_ret1, short_ret1, short_xchg2, short_tail2, short_mov3, short_lea4, short_page_end
  .type call_ret1, @function
  .balign 16
call_ret1:
  mov %rdi, %rax
  call short_ret1
  ret
  .size call_ret1, .-call_ret1
  .type short_ret1, @function
  .balign 16
short_ret1:
  ret
  .size short_ret1, .-short_ret1
  .type short_xchg2, @function
  .balign 16
short_xchg2:
  xchg %edi, %eax
  ret
  .size short_xchg2, .-short_xchg2
  .type short_tail2, @function
  .balign 16
short_tail2:
  jmp .Lshort_lea4
  .size short_tail2, .-short_tail2
  .type short_mov3, @function
  .balign 16
short_mov3:
  mov %edi, %eax
  ret
  .size short_mov3, .-short_mov3
  .type short_lea4, @function
  .balign 16
short_lea4:
.Lshort_lea4:
  lea 1(%rdi), %eax
  ret
  .size short_lea4, .-short_lea4
  .balign 4096
  .skip 4093, 0xcc
  .type short_page_end, @function
short_page_end:
  mov %edi, %eax
  ret
  .size short_page_end, .-short_page_end
  .balign 16
)");

extern "C" {
long call_ret1(long);
long short_ret1(long);
long short_xchg2(long);
long short_tail2(long);
long short_mov3(long);
long short_lea4(long);
long short_page_end(long);
}

namespace {

std::atomic<bool> g_stop{false};
std::atomic<std::uint64_t> g_ret1{0}, g_xchg2{0}, g_tail2{0}, g_mov3{0}, g_lea4{0}, g_page{0};

void check(long got, long want) {
  if (got != want) fault::g_bad.fetch_add(1, std::memory_order_relaxed);
}

// One call of every function, and of probe_fn.
void call_all(std::uint64_t i) {
  long x = static_cast<long>(i & 0xffff);
  fault::call_probe(i);
  check(call_ret1(x), x);
  check(short_xchg2(x), x);
  check(short_tail2(x), x + 1);
  check(short_mov3(x), x);
  check(short_lea4(x), x + 1);
  check(short_page_end(x), x);
  for (auto* n : {&g_ret1, &g_xchg2, &g_tail2, &g_mov3, &g_page})
    n->fetch_add(1, std::memory_order_relaxed);
  g_lea4.fetch_add(2, std::memory_order_relaxed);
}

void calls(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n && !g_stop.load(std::memory_order_relaxed); ++i) call_all(i);
}

// --idle: "go K" rounds, each thread K calls of every function, answered once all are done.
int run_idle(unsigned threads) {
  std::mutex m;
  std::condition_variable cv, done_cv;
  std::uint64_t round = 0, k = 0;
  std::size_t pending = 0;
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (std::uint64_t seen = 0;;) {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return g_stop.load() || round != seen; });
        if (g_stop.load()) return;
        seen = round;
        lock.unlock();
        calls(k);
        lock.lock();
        if (--pending == 0) done_cv.notify_all();
      }
    });
  }
  fault::say("ready " + std::to_string(getpid()));
  for (std::string line; std::getline(std::cin, line) && line != "stop";) {
    if (line.rfind("go ", 0) != 0) continue;
    std::unique_lock<std::mutex> lock(m);
    k = std::stoull(line.substr(3));
    pending = workers.size();
    ++round;
    cv.notify_all();
    done_cv.wait(lock, [&] { return pending == 0; });
    fault::say("done");
  }
  {
    std::lock_guard<std::mutex> lock(m);
    g_stop = true;
  }
  cv.notify_all();
  for (auto& w : workers) w.join();
  return 0;
}

void run_threads(unsigned threads, std::uint64_t n, bool until_stop) {
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) ts.emplace_back(calls, n);
  fault::say("ready " + std::to_string(getpid()));
  if (until_stop) {
    for (std::string line; std::getline(std::cin, line) && line != "stop";) {
    }
    g_stop = true;
  }
  for (auto& t : ts) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  for (auto* fn : {short_ret1, short_xchg2, short_tail2, short_mov3, short_lea4, short_page_end})
    fault::register_site(reinterpret_cast<const void*>(fn));
  unsigned threads = std::stoul(fault::option(argc, argv, "--threads", "2"));
  if (fault::flag(argc, argv, "--idle")) {
    run_idle(threads);
  } else if (fault::flag(argc, argv, "--calls")) {
    run_threads(threads, std::stoull(fault::option(argc, argv, "--calls", "1")), false);
  } else {
    run_threads(threads, UINT64_MAX, true);
  }
  auto n = [](const std::atomic<std::uint64_t>& c) { return std::to_string(c.load()); };
  fault::say_end("short_ret1=" + n(g_ret1) + " short_xchg2=" + n(g_xchg2) +
                 " short_tail2=" + n(g_tail2) + " short_mov3=" + n(g_mov3) +
                 " short_lea4=" + n(g_lea4) + " short_page_end=" + n(g_page));
  return 0;
}
