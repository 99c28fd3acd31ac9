// libFuzzer: ELF files, mutated, read through libdwfl the way probecost reads a module's
// symbols. A file libdwfl rejects is an Error; a crash or a hang is a bug (ours, or
// elfutils' where our use of it cannot guard against it).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "tracer/symbols/symbols.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<char> image(reinterpret_cast<const char*>(data),
                          reinterpret_cast<const char*>(data) + size);
  try {
    auto symbols = probecost::read_elf_symbols(image, "fuzzed.elf");
    for (const auto& s : symbols) {
      if (s.name.empty()) __builtin_trap();
    }
  } catch (const probecost::Error&) {
  }
  return 0;
}
