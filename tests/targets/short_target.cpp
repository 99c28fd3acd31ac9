// The tracee of the short-function tests (issue 23 item 1): functions of 1 to 4 bytes, one ending
// at a page's end and one at the end of the executable mapping, beside big, which a jump fits
// (short_fns.S). Each round calls every function N times and says, for each, how many calls it
// made into it and the sum of what they returned:
//   "big:N:SUM short1:N:SUM ... short2_tail:N:- short4:2N:SUM ..."
// (short2_tail is a tail call into short4: its return is short4's, counted there; "-": its exit,
// the jmp, sees no result of its own).
//   run N    one round, its line on stdout, then exit 0
//   serve    "ready", then a round per line "N" on stdin, answered with its line
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
long call_short1(long);
long short2(long);
long short2_tail(long);
long short3(long);
long short4(long);
long short4_mov(long);
long page_end(long);
long after_page(long);
long map_end(long);
long big(long);
}

namespace {

struct Fn {
  const char* name;
  long (*call)(long);
};

// short1 is called through call_short1, which sets %rax to x: its `ret` returns it.
const Fn kFns[] = {{"big", big},
                   {"short1", call_short1},
                   {"short2", short2},
                   {"short2_tail", nullptr},
                   {"short3", short3},
                   {"short4", short4},
                   {"short4_mov", short4_mov},
                   {"page_end", page_end},
                   {"after_page", after_page},
                   {"map_end", map_end}};

std::string round(long n) {
  std::string out;
  long tail_calls = 0, tail_sum = 0;
  for (long i = 0; i < n; ++i) {
    tail_sum += short2_tail(i);
    ++tail_calls;
  }
  for (const Fn& f : kFns) {
    long calls = 0, sum = 0;
    if (f.call) {
      for (long i = 0; i < n; ++i, ++calls) sum += f.call(i);
    }
    if (std::strcmp(f.name, "short4") == 0) {
      calls += tail_calls;
      sum += tail_sum;
    }
    bool tail = f.call == nullptr;
    out += (out.empty() ? "" : " ") + std::string(f.name) + ":" +
           std::to_string(tail ? tail_calls : calls) + ":" + (tail ? "-" : std::to_string(sum));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "run" && argc > 2) {
    std::printf("%s\n", round(std::strtol(argv[2], nullptr, 10)).c_str());
    return 0;
  }
  if (mode != "serve") {
    std::fprintf(stderr, "usage: short_target run N | serve\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("ready\n");
  char line[64];
  while (std::fgets(line, sizeof line, stdin))
    std::printf("%s\n", round(std::strtol(line, nullptr, 10)).c_str());
  return 0;
}
