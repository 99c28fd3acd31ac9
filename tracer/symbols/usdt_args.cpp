#include "tracer/symbols/usdt_args.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/error.hpp"

namespace probecost {

namespace {

#define REG(name) static_cast<int>(offsetof(user_regs_struct, name))

struct RegName {
  const char* name;
  int reg;
  int bits;
  bool high = false;
};

// The general-purpose registers and their parts, as GAS names them.
const RegName kRegs[] = {
    {"rax", REG(rax), 64},     {"eax", REG(rax), 32},     {"ax", REG(rax), 16},
    {"al", REG(rax), 8},       {"ah", REG(rax), 8, true}, {"rbx", REG(rbx), 64},
    {"ebx", REG(rbx), 32},     {"bx", REG(rbx), 16},      {"bl", REG(rbx), 8},
    {"bh", REG(rbx), 8, true}, {"rcx", REG(rcx), 64},     {"ecx", REG(rcx), 32},
    {"cx", REG(rcx), 16},      {"cl", REG(rcx), 8},       {"ch", REG(rcx), 8, true},
    {"rdx", REG(rdx), 64},     {"edx", REG(rdx), 32},     {"dx", REG(rdx), 16},
    {"dl", REG(rdx), 8},       {"dh", REG(rdx), 8, true}, {"rsi", REG(rsi), 64},
    {"esi", REG(rsi), 32},     {"si", REG(rsi), 16},      {"sil", REG(rsi), 8},
    {"rdi", REG(rdi), 64},     {"edi", REG(rdi), 32},     {"di", REG(rdi), 16},
    {"dil", REG(rdi), 8},      {"rbp", REG(rbp), 64},     {"ebp", REG(rbp), 32},
    {"bp", REG(rbp), 16},      {"bpl", REG(rbp), 8},      {"rsp", REG(rsp), 64},
    {"esp", REG(rsp), 32},     {"sp", REG(rsp), 16},      {"spl", REG(rsp), 8},
    {"rip", REG(rip), 64},
};

std::optional<RegName> register_named(const std::string& name) {
  for (const auto& r : kRegs) {
    if (name == r.name) return r;
  }
  // %r8 .. %r15 and their parts: r8d, r8w, r8b.
  static const int high[] = {REG(r8),  REG(r9),  REG(r10), REG(r11),
                             REG(r12), REG(r13), REG(r14), REG(r15)};
  if (name.size() < 2 || name[0] != 'r') return std::nullopt;
  char* end = nullptr;
  long n = std::strtol(name.c_str() + 1, &end, 10);
  if (end == name.c_str() + 1 || n < 8 || n > 15) return std::nullopt;
  std::string suffix(end);
  int bits = suffix.empty() ? 64 : suffix == "d" ? 32 : suffix == "w" ? 16 : suffix == "b" ? 8 : 0;
  if (!bits) return std::nullopt;
  return RegName{"", high[n - 8], bits};
}

bool parse_int(const std::string& s, std::int64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(s.c_str(), &end, 0);
  return errno == 0 && *end == '\0';
}

bool set_register(UsdtArg& a, const std::string& text) {
  if (text.size() < 2 || text[0] != '%') return false;
  auto r = register_named(text.substr(1));
  if (!r) return false;
  a.reg = r->reg;
  a.reg_bits = r->bits;
  a.high_byte = r->high;
  return true;
}

UsdtArg parse_one(const std::string& text) {
  UsdtArg a;
  a.text = text;
  auto at = text.find('@');
  std::int64_t size = 0;
  if (at == std::string::npos || !parse_int(text.substr(0, at), size)) return a;
  if (std::abs(size) != 1 && std::abs(size) != 2 && std::abs(size) != 4 && std::abs(size) != 8)
    return a;
  a.size = static_cast<int>(std::abs(size));
  a.is_signed = size < 0;
  std::string op = text.substr(at + 1);
  if (!op.empty() && op[0] == '$') {
    if (parse_int(op.substr(1), a.value)) a.kind = UsdtArg::Kind::Constant;
    return a;
  }
  if (!op.empty() && op[0] == '%') {
    if (set_register(a, op)) a.kind = UsdtArg::Kind::Register;
    return a;
  }
  // OFFSET(%reg): the offset a number (a symbol's name, foo(%rip), is not known here), one
  // base register, no index.
  auto open = op.find('('), close = op.find(')');
  if (open == std::string::npos || close != op.size() - 1) return a;
  std::string offset = op.substr(0, open), base = op.substr(open + 1, close - open - 1);
  if (!offset.empty() && !parse_int(offset, a.value)) return a;
  if (base.find(',') != std::string::npos || !set_register(a, base) || a.reg_bits != 64) return a;
  a.kind = UsdtArg::Kind::Memory;
  return a;
}

std::uint64_t register_value(const UsdtArg& a, const user_regs_struct& regs) {
  std::uint64_t v;
  std::memcpy(&v, reinterpret_cast<const char*>(&regs) + a.reg, sizeof v);
  if (a.high_byte) return (v >> 8) & 0xff;
  return a.reg_bits == 64 ? v : v & ((1ull << a.reg_bits) - 1);
}

std::int64_t extend(std::uint64_t v, int size, bool is_signed) {
  if (size == 8) return static_cast<std::int64_t>(v);
  unsigned bits = static_cast<unsigned>(size) * 8;
  v &= (1ull << bits) - 1;
  if (is_signed && (v >> (bits - 1)) & 1) v |= ~((1ull << bits) - 1);
  return static_cast<std::int64_t>(v);
}

}  // namespace

std::vector<UsdtArg> parse_usdt_args(const std::string& specs) {
  std::vector<UsdtArg> out;
  std::istringstream in(specs);
  for (std::string one; in >> one;) out.push_back(parse_one(one));
  return out;
}

std::optional<std::int64_t> usdt_arg_value(const UsdtArg& arg, const user_regs_struct& regs,
                                           TraceeMemory& memory) {
  switch (arg.kind) {
    case UsdtArg::Kind::Constant:
      return extend(static_cast<std::uint64_t>(arg.value), arg.size, arg.is_signed);
    case UsdtArg::Kind::Register:
      return extend(register_value(arg, regs), arg.size, arg.is_signed);
    case UsdtArg::Kind::Memory: {
      std::uint64_t v = 0;
      RuntimeAddr at(register_value(arg, regs) + static_cast<std::uint64_t>(arg.value));
      try {
        memory.read(
            at, std::span(reinterpret_cast<std::uint8_t*>(&v), static_cast<std::size_t>(arg.size)));
      } catch (const Error&) {
        return std::nullopt;
      }
      return extend(v, arg.size, arg.is_signed);
    }
    case UsdtArg::Kind::Unsupported:
      break;
  }
  return std::nullopt;
}

std::optional<std::string> usdt_arg_string(std::int64_t value, TraceeMemory& memory,
                                           std::size_t bound) {
  if (value < 4096) return std::nullopt;  // NULL, small numbers: not a pointer to text
  std::string out;
  // Read in small pieces: a string near the end of a mapping must not fail a larger read.
  for (std::size_t off = 0; off <= bound; off += 16) {
    std::uint8_t piece[16];
    try {
      memory.read(RuntimeAddr(static_cast<std::uint64_t>(value) + off), piece);
    } catch (const Error&) {
      return std::nullopt;
    }
    for (std::uint8_t c : piece) {
      if (c == '\0') return out.empty() ? std::nullopt : std::optional(out);
      if (c < 0x20 || c > 0x7e) return std::nullopt;  // not text
      if (out.size() == bound) return out + "...";
      out += static_cast<char>(c);
    }
  }
  return out + "...";
}

std::string usdt_args_text(const std::vector<UsdtArg>& args, const user_regs_struct& regs,
                           TraceeMemory& memory, std::size_t bound) {
  std::string out;
  for (const auto& a : args) {
    if (!out.empty()) out += ", ";
    auto v = usdt_arg_value(a, regs, memory);
    if (!v) {
      out += "?";
      continue;
    }
    auto s = a.size == 8 && !a.is_signed ? usdt_arg_string(*v, memory, bound) : std::nullopt;
    out += s ? "\"" + *s + "\"" : std::to_string(*v);
  }
  return out;
}

}  // namespace probecost
