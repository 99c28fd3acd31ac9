#include "tracer/symbols/cxx_names.hpp"

#include <libiberty/demangle.h>

#include <cctype>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

namespace probecost {

namespace {

// "memcpy@@GLIBC_2.14" -> {"memcpy", "@@GLIBC_2.14"}: views of `name`, which every symbol of
// a module goes through.
std::pair<std::string_view, std::string_view> split_version(std::string_view name) {
  auto at = name.find('@');
  if (at == std::string_view::npos) return {name, ""};
  return {name.substr(0, at), name.substr(at)};
}

bool is_mangled(std::string_view base) {
  return base.size() > 2 && base[0] == '_' && base[1] == 'Z';
}

// Itanium C++ names only (DMGL_GNU_V3); empty when `base` is not one.
std::string run_demangler(const std::string& base, int options) {
  std::unique_ptr<char, decltype(&std::free)> out(
      cplus_demangle(base.c_str(), options | DMGL_ANSI | DMGL_GNU_V3), &std::free);
  return out ? out.get() : "";
}

bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Spaces dropped, but for one between two words: "unsigned long", "char const*".
std::string normalize(const std::string& s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && !out.empty() && word_char(out.back()) && word_char(c)) out += ' ';
    out += c;
    space = false;
  }
  return out;
}

bool ends_with_component(const std::string& name, const std::string& tail) {
  return name.size() > tail.size() + 2 &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
         name.compare(name.size() - tail.size() - 2, 2, "::") == 0;
}

// The last word of a function's name ("method" in "ns::Klass::method(long)", "foo" in
// "foo<int>"), which its mangled name spells out as <length><word>; empty for operators,
// constructors and destructors, which are mangled as codes.
std::string last_identifier(const std::string& name) {
  std::string head = name.substr(0, name.find('('));
  if (head.find("operator") != std::string::npos) return "";
  std::string flat;
  int depth = 0;
  for (char c : head) {
    if (c == '<') ++depth;
    if (depth == 0) flat += c;
    if (c == '>' && depth > 0) --depth;
  }
  std::vector<std::string> parts;
  for (std::size_t from = 0;;) {
    auto sep = flat.find("::", from);
    parts.push_back(normalize(flat.substr(from, sep - from)));
    if (sep == std::string::npos) break;
    from = sep + 2;
  }
  const std::string& last = parts.back();
  bool word = !last.empty();
  for (char c : last) word = word && word_char(c);
  bool constructor = parts.size() > 1 && parts[parts.size() - 2] == last;
  return word && !constructor ? last : "";
}

}  // namespace

std::string demangle(const std::string& linkage_name) {
  auto [base, version] = split_version(linkage_name);
  if (!is_mangled(base)) return linkage_name;
  std::string out = run_demangler(std::string(base), DMGL_PARAMS);
  return out.empty() ? linkage_name : out + std::string(version);
}

std::string overload_set(const std::string& linkage_name) {
  std::string_view base = split_version(linkage_name).first;
  if (!is_mangled(base) || base.find('.') != std::string_view::npos) return "";
  return run_demangler(std::string(base), DMGL_NO_OPTS);
}

NameQuery::NameQuery(const std::string& wanted) {
  auto [base, version] = split_version(wanted);
  base_ = base;
  auto from = version.find_first_not_of('@');
  version_ = from == std::string_view::npos ? "" : std::string(version.substr(from));
  normal_ = normalize(base_);
  with_params_ = base_.find('(') != std::string::npos;
  identifier_ = last_identifier(base_);
}

NameQuery::Match NameQuery::match(std::string_view linkage_name) const {
  auto [base, version] = split_version(linkage_name);
  if (!version_.empty()) {
    auto from = version.find_first_not_of('@');
    if (from == std::string_view::npos || version.substr(from) != version_) return Match::None;
  }
  if (base == base_) return Match::Exact;
  if (!is_mangled(base) || !may_match(base)) return Match::None;
  return match_demangled(std::string(base));
}

// A cheap test first, as most of a module's names are not the one wanted: the last word of a
// function's name is spelled out in its mangled name.
bool NameQuery::may_match(std::string_view base) const {
  return identifier_.empty() || base.find(identifier_) != std::string_view::npos;
}

NameQuery::Match NameQuery::match_demangled(const std::string& base) const {
  if (with_params_) {
    for (int options : {DMGL_PARAMS, DMGL_PARAMS | DMGL_RET_DROP}) {
      std::string name = normalize(run_demangler(base, options));
      if (name == normal_) return Match::Name;
      if (options & DMGL_RET_DROP && ends_with_component(name, normal_)) return Match::Suffix;
    }
    return Match::None;
  }
  std::string name = normalize(overload_set(base));
  if (name.empty()) return Match::None;
  if (name == normal_) return Match::Name;
  return ends_with_component(name, normal_) ? Match::Suffix : Match::None;
}

}  // namespace probecost
