#pragma once
// NameTable: the one table of an enum's names. A value's name (what is printed, in every
// format) and a name's value (what is parsed) are read from the same entries, so the two
// directions cannot drift apart; the list of names is what an error for a bad one says.
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace probecost {

template <class E>
struct Named {
  E value;
  const char* name;
};

template <class E, std::size_t N>
struct NameTable {
  std::array<Named<E>, N> entries;

  constexpr const char* name(E value) const {
    for (const auto& e : entries) {
      if (e.value == value) return e.name;
    }
    return "?";
  }
  // None for a name that is not in the table: the parser says why, and what is known.
  constexpr std::optional<E> find(std::string_view text) const {
    for (const auto& e : entries) {
      if (text == e.name) return e.value;
    }
    return std::nullopt;
  }
  // Every name, in the table's order: "int3, jump or auto".
  std::string known() const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      out += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(entries[i].name);
    }
    return out;
  }
};

// constexpr auto kNames = name_table<Via>({{Via::Int3, "int3"}, {Via::Jump, "jump"}});
template <class E, std::size_t N>
constexpr NameTable<E, N> name_table(const Named<E> (&entries)[N]) {
  NameTable<E, N> t{};
  for (std::size_t i = 0; i < N; ++i) t.entries[i] = entries[i];
  return t;
}

}  // namespace probecost
