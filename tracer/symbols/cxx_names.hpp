#pragma once
// Function names as a user writes them, matched against the linkage names of a symbol table.
// C++ names are demangled with libiberty's cplus_demangle, the demangler of c++filt and gdb,
// which also gives a name without its parameter list (c++filt -p): "ns::Klass::method" for
// _ZNK2ns5Klass6methodEl. A symbol version ("@@GLIBC_2.14") stays after the name.
#include <string>
#include <string_view>

namespace probecost {

// "middle(long)" for "_Z6middlel", "std::string::swap(std::string&)@@GLIBCXX_3.4" for
// "_ZNSs4swapERSs@@GLIBCXX_3.4"; anything that is not a mangled C++ name, as it is.
std::string demangle(const std::string& linkage_name);

// The function's qualified name alone, without parameters or return type ("ns::Klass::method",
// "foo<int>"): what every overload shares. Empty when `linkage_name` is not a mangled C++
// name, or is a clone of a function (".cold", ".isra.0", ".constprop.0": a part or a
// specialised copy that only the whole demangled name, "[clone .cold]" included, names).
std::string overload_set(const std::string& linkage_name);

// One name a user gave (-b NAME, the SYMBOL of a probe spec), ready to be compared with many
// symbols: a C name or a mangled one, as it is ("memcpy", "_Z6middlel"), with an optional symbol
// version ("memcpy@GLIBC_2.2.5"; "@" and "@@" alike); or a demangled C++ name, as gdb, perf and
// bpftrace take them: "middle" (every overload), "middle(long)" (one), "ns::Klass::method".
// Spaces only matter between two words ("unsigned long"): "f(int,char)" is "f(int, char)".
class NameQuery {
 public:
  enum class Match {
    None,
    Suffix,  // the name ends in "::" + the query: "method" for ns::Klass::method (gdb's
             // wild matching); only used where nothing matches better
    Name,    // the qualified name without parameters, or with them
    Exact,   // the linkage name itself
  };

  explicit NameQuery(const std::string& wanted);
  Match match(std::string_view linkage_name) const;

 private:
  bool may_match(std::string_view base) const;
  Match match_demangled(const std::string& base) const;

  std::string base_;     // without the version
  std::string version_;  // without its '@'s; empty when none was given
  std::string normal_;   // base_, spaces normalised
  bool with_params_ = false;
  std::string identifier_;  // the last word of the name, which a mangled name spells out
};

}  // namespace probecost
