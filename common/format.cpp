#include "common/format.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/error.hpp"

namespace probecost {

namespace {

// "1234567.89" -> "1,234,567.89"; a leading '-' stays in front.
std::string group(const std::string& s) {
  std::size_t start = s[0] == '-' || s[0] == '+' ? 1 : 0;
  std::size_t end = s.find('.');
  if (end == std::string::npos) end = s.size();
  std::string out = s.substr(0, start);
  for (std::size_t i = start; i < end; ++i) {
    if (i > start && (end - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out + s.substr(end);
}

// printf's %.*f, without the sign of a value that rounds to zero.
std::string fixed(double v, int decimals, bool plus) {
  char buf[400];
  std::snprintf(buf, sizeof buf, plus ? "%+.*f" : "%.*f", decimals, v);
  std::string s = buf;
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) {
    // Set in place: GCC 12 warns wrongly (-Wrestrict, PR 105651) on "+" + std::string.
    if (plus) {
      s[0] = '+';
    } else {
      s.erase(0, 1);
    }
  }
  return s;
}

std::string not_finite(double v) {
  return std::isnan(v) ? "nan" : v < 0 ? "-inf" : "inf";
}

}  // namespace

Format parse_format(const std::string& text) {
  return parse_format(text, {Format::Text, Format::Json, Format::Csv});
}

Format parse_format(const std::string& text, std::initializer_list<Format> allowed) {
  auto f = kFormatNames.find(text);
  std::string known;
  for (Format a : allowed) {
    if (f == a) return a;
    known += (known.empty()               ? ""
              : a == *(allowed.end() - 1) ? " or "
                                          : ", ") +
             std::string(kFormatNames.name(a));
  }
  throw UsageError("bad format '" + text + "' (" + known + ")");
}

std::string num(double v, int decimals) {
  if (!std::isfinite(v)) return not_finite(v);
  return group(fixed(v, decimals, false));
}

std::string signed_num(double v, int decimals) {
  if (!std::isfinite(v)) return v > 0 ? "+inf" : not_finite(v);
  return group(fixed(v, decimals, true));
}

std::string group_thousands(double v) {
  return num(v, 0);
}

std::string percent(double p) {
  return num(p, std::fabs(p) >= 9.995 ? 1 : 2) + "%";
}

std::string times(double ratio) {
  return num(ratio, std::fabs(ratio) >= 99.995 ? 0 : 2);
}

std::string human_ns(double ns) {
  if (!std::isfinite(ns)) return not_finite(ns) + " ns";
  static const char* const units[] = {"ns", "\u00b5s", "ms", "s"};
  double a = std::fabs(ns);
  int u = 0;
  // The unit is chosen after rounding to 3 digits: 999.6 ns is "1.00 µs", not "1000 ns".
  while (u < 3 && a >= 999.5) {
    a /= 1000;
    ++u;
  }
  int decimals = a >= 99.95 ? 0 : a >= 9.995 ? 1 : 2;
  return num(ns < 0 ? -a : a, decimals) + " " + units[u];
}

std::string pad(const std::string& s, std::size_t width, bool left) {
  std::size_t chars = 0;
  for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
  std::string fill(chars < width ? width - chars : 0, ' ');
  return left ? s + fill : fill + s;
}

std::string plain_number(double v) {
  if (!std::isfinite(v)) return not_finite(v);
  if (v == 0) return "0";
  char buf[400];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, res.ptr);
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_dump(const nlohmann::json& j, int indent) {
  // nlohmann prints a double below 1e-4 or from 1e15 on with an exponent ("1.7e-15"), and -0
  // as "-0.0". Rewrite those number tokens, outside strings, in fixed notation.
  std::string in = json_text(j, indent);
  std::string out;
  out.reserve(in.size());
  bool in_string = false;
  for (std::size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < in.size()) {
        out += in[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      std::size_t end = in.find_first_not_of("+-0123456789.eE", i);
      if (end == std::string::npos) end = in.size();
      std::string token = in.substr(i, end - i);
      i = end - 1;
      if (token.find_first_of("eE") != std::string::npos) {
        double v = std::strtod(token.c_str(), nullptr);
        std::string fixed = plain_number(v);
        // A whole number keeps nlohmann's ".0": it was a double.
        if (fixed.find('.') == std::string::npos) fixed += ".0";
        out += fixed;
      } else if (token.find_first_not_of("-0.") == std::string::npos && token[0] == '-') {
        out += token.substr(1);  // -0.0
      } else {
        out += token;
      }
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace probecost
