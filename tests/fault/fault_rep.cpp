// Probe sites whose first instruction is `rep movsb` or `rep stosb`: one hit per call, however
// many bytes the instruction moves (a single-step runs one iteration of it).
//   fault_rep --kind movsb|stosb [--calls N] [--bytes B] [--ctl-fd FD]
// Calls the site N times (100) with B bytes (64) each, checks every result, and ends.
#include <cstring>
#include <string>
#include <vector>

#include "target_common.hpp"

// rep_movsb_site: copies RCX bytes from RSI to RDI. rep_stosb_site: stores AL RCX times at
// RDI. Called from inline asm with those registers set: the first instruction is the rep.
asm(R"(
  .text
  .globl rep_movsb_site
  .type rep_movsb_site, @function
rep_movsb_site:
  rep movsb
  ret
  .size rep_movsb_site, .-rep_movsb_site
  .globl rep_stosb_site
  .type rep_stosb_site, @function
rep_stosb_site:
  rep stosb
  ret
  .size rep_stosb_site, .-rep_stosb_site
)");

extern "C" void rep_movsb_site();
extern "C" void rep_stosb_site();

namespace {

// The red zone below RSP may hold the caller's data: step over it before the call.
void movsb(void* dst, const void* src, std::size_t n) {
  asm volatile("sub $128, %%rsp\n\tcall rep_movsb_site\n\tadd $128, %%rsp"
               : "+D"(dst), "+S"(src), "+c"(n)
               :
               : "memory", "cc");
}

void stosb(void* dst, unsigned char value, std::size_t n) {
  asm volatile("sub $128, %%rsp\n\tcall rep_stosb_site\n\tadd $128, %%rsp"
               : "+D"(dst), "+c"(n)
               : "a"(value)
               : "memory", "cc");
}

}  // namespace

int main(int argc, char** argv) {
  fault::init(argc, argv);
  fault::register_site(reinterpret_cast<const void*>(&rep_movsb_site));
  fault::register_site(reinterpret_cast<const void*>(&rep_stosb_site));
  bool stos = fault::option(argc, argv, "--kind", "movsb") == "stosb";
  std::uint64_t calls = std::stoull(fault::option(argc, argv, "--calls", "100"));
  std::size_t bytes = std::stoull(fault::option(argc, argv, "--bytes", "64"));
  std::vector<unsigned char> src(bytes), dst(bytes);
  fault::say("ready " + std::to_string(getpid()));
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < calls; ++i) {
    for (std::size_t b = 0; b < bytes; ++b) src[b] = static_cast<unsigned char>(i + b);
    std::memset(dst.data(), 0, bytes);
    if (stos) {
      stosb(dst.data(), static_cast<unsigned char>(i | 1), bytes);
      for (std::size_t b = 0; b < bytes; ++b) bad += dst[b] != static_cast<unsigned char>(i | 1);
    } else {
      movsb(dst.data(), src.data(), bytes);
      bad += std::memcmp(dst.data(), src.data(), bytes) != 0;
    }
  }
  fault::g_bad += bad;
  fault::say_end("site_calls=" + std::to_string(calls));
  return 0;
}
