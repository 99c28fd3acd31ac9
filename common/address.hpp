#pragma once
// Strong address types. A runtime address in the tracee, an address as written in an ELF file,
// and the load bias between them are different things; mixing them is the classic PIE bug.
#include <compare>
#include <cstdint>
#include <cstdio>
#include <string>

namespace probecost {

template <typename Tag>
class Addr {
 public:
  constexpr Addr() = default;
  constexpr explicit Addr(std::uint64_t value) : value_(value) {}
  constexpr std::uint64_t value() const { return value_; }
  constexpr Addr operator+(std::int64_t offset) const { return Addr(value_ + offset); }
  constexpr Addr operator-(std::int64_t offset) const { return Addr(value_ - offset); }
  constexpr std::int64_t operator-(Addr other) const {
    return static_cast<std::int64_t>(value_ - other.value_);
  }
  constexpr auto operator<=>(const Addr&) const = default;

  std::string hex() const {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value_));
    return buf;
  }

 private:
  std::uint64_t value_ = 0;
};

struct RuntimeTag {};
struct FileTag {};
using RuntimeAddr = Addr<RuntimeTag>;  // an address in the live tracee
using FileAddr = Addr<FileTag>;        // st_value / p_vaddr as the ELF file says

// runtime = file + bias. For a non-PIE executable the bias is 0.
class LoadBias {
 public:
  constexpr explicit LoadBias(std::int64_t bias) : bias_(bias) {}
  constexpr RuntimeAddr apply(FileAddr a) const { return RuntimeAddr(a.value() + bias_); }
  constexpr FileAddr unapply(RuntimeAddr a) const { return FileAddr(a.value() - bias_); }
  constexpr std::int64_t value() const { return bias_; }

 private:
  std::int64_t bias_;
};

}  // namespace probecost
