#pragma once
// What a breakpoint site needs from the tracee: read and write bytes at a runtime address.
// The tracer implements it (pread/pwrite on /proc/PID/mem); tests can use a fake.
#include <cstdint>
#include <span>

#include "common/address.hpp"

namespace probecost {

class TraceeMemory {
 public:
  virtual ~TraceeMemory() = default;
  // Both throw Error when the whole range cannot be transferred.
  virtual void read(RuntimeAddr at, std::span<std::uint8_t> out) = 0;
  virtual void write(RuntimeAddr at, std::span<const std::uint8_t> bytes) = 0;

  std::uint8_t read_byte(RuntimeAddr at) {
    std::uint8_t b = 0;
    read(at, {&b, 1});
    return b;
  }
  void write_byte(RuntimeAddr at, std::uint8_t b) { write(at, {&b, 1}); }
};

}  // namespace probecost
