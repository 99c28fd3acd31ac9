// Names of functions and modules as users write them, without a process: C++ names demangled
// and matched (overloads, methods, operators), probe specs with C++ names, and the symbol
// versions and SONAME read from glibc's own file.
#include <fcntl.h>
#include <gelf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "common/error.hpp"
#include "tracer/symbols/cxx_names.hpp"
#include "tracer/symbols/elf_tables.hpp"
#include "tracer/symbols/probes.hpp"

using namespace probecost;
using Match = NameQuery::Match;

TEST(SymbolNames, DemangledAsCxxfiltPrintsThem) {
  EXPECT_EQ(demangle("_Z6middlel"), "middle(long)");
  EXPECT_EQ(demangle("_ZNK2ns5Klass6methodEv"), "ns::Klass::method() const");
  EXPECT_EQ(demangle("_ZNSs4swapERSs@@GLIBCXX_3.4"),
            "std::string::swap(std::string&)@@GLIBCXX_3.4");
  EXPECT_EQ(demangle("memcpy@@GLIBC_2.14"), "memcpy@@GLIBC_2.14");
  EXPECT_EQ(demangle("_Znot_mangled"), "_Znot_mangled");
  EXPECT_EQ(overload_set("_ZNK2ns5Klass6methodEl"), "ns::Klass::method");
  EXPECT_EQ(overload_set("_Z3fooIiEvT_"), "foo<int>");        // no return type
  EXPECT_EQ(overload_set("_ZN2ns5Klass6methodEv.cold"), "");  // a part of a function
  EXPECT_EQ(overload_set("main"), "");
}

TEST(SymbolNames, ACNameOrAMangledOneMatchesItselfWithAnyVersion) {
  EXPECT_EQ(NameQuery("memcpy").match("memcpy"), Match::Exact);
  EXPECT_EQ(NameQuery("memcpy").match("memcpy@@GLIBC_2.14"), Match::Exact);
  EXPECT_EQ(NameQuery("memcpy").match("memcpy@GLIBC_2.2.5"), Match::Exact);
  EXPECT_EQ(NameQuery("memcpy").match("memcpy_chk"), Match::None);
  EXPECT_EQ(NameQuery("memcpy").match("__memcpy"), Match::None);
  // A version given picks that version, "@" or "@@" alike.
  EXPECT_EQ(NameQuery("memcpy@GLIBC_2.2.5").match("memcpy@GLIBC_2.2.5"), Match::Exact);
  EXPECT_EQ(NameQuery("memcpy@GLIBC_2.2.5").match("memcpy@@GLIBC_2.14"), Match::None);
  EXPECT_EQ(NameQuery("memcpy@GLIBC_2.14").match("memcpy@@GLIBC_2.14"), Match::Exact);
  EXPECT_EQ(NameQuery("memcpy@@GLIBC_2.14").match("memcpy"), Match::None);
  EXPECT_EQ(NameQuery("_Z6middlel").match("_Z6middlel"), Match::Exact);
}

TEST(SymbolNames, ADemangledNameMatchesEveryOverloadOrOne) {
  NameQuery middle("middle");
  EXPECT_EQ(middle.match("_Z6middlel"), Match::Name);
  EXPECT_EQ(middle.match("_Z6middlei"), Match::Name);
  EXPECT_EQ(middle.match("_Z7middlexl"), Match::None);
  EXPECT_EQ(middle.match("_ZN2ns6middleEv"), Match::Suffix);  // ns::middle(), as gdb finds it
  EXPECT_EQ(NameQuery("middle(long)").match("_Z6middlel"), Match::Name);
  EXPECT_EQ(NameQuery("middle(long)").match("_Z6middlei"), Match::None);
  EXPECT_EQ(NameQuery("middle( long )").match("_Z6middlel"), Match::Name);
  EXPECT_EQ(NameQuery("ns::Klass::method").match("_ZNK2ns5Klass6methodEv"), Match::Name);
  EXPECT_EQ(NameQuery("ns::Klass::method").match("_ZN2ns5Klass6methodEl"), Match::Name);
  EXPECT_EQ(NameQuery("Klass::method").match("_ZN2ns5Klass6methodEl"), Match::Suffix);
  EXPECT_EQ(NameQuery("ns::Klass::method() const").match("_ZNK2ns5Klass6methodEv"), Match::Name);
  EXPECT_EQ(NameQuery("ns::Klass::method()").match("_ZNK2ns5Klass6methodEv"), Match::None);
  EXPECT_EQ(NameQuery("f(int,char const*)").match("_Z1fiPKc"), Match::Name);
  EXPECT_EQ(NameQuery("f(unsigned long)").match("_Z1fm"), Match::Name);
  EXPECT_EQ(NameQuery("f(unsignedlong)").match("_Z1fm"), Match::None);
  // Templates without their return type; operators and constructors, which the mangled name
  // spells as codes.
  EXPECT_EQ(NameQuery("foo<int>").match("_Z3fooIiEvT_"), Match::Name);
  EXPECT_EQ(NameQuery("foo<int>(int)").match("_Z3fooIiEvT_"), Match::Name);
  EXPECT_EQ(NameQuery("void foo<int>(int)").match("_Z3fooIiEvT_"), Match::Name);
  EXPECT_EQ(NameQuery("A::operator+").match("_ZN1AplERKS_"), Match::Name);
  EXPECT_EQ(NameQuery("ns::Klass::Klass").match("_ZN2ns5KlassC2Ev"), Match::Name);
  // A clone is named only by its whole name.
  EXPECT_EQ(NameQuery("ns::Klass::method").match("_ZN2ns5Klass6methodEv.cold"), Match::None);
  EXPECT_EQ(NameQuery("ns::Klass::method() [clone .cold]").match("_ZN2ns5Klass6methodEv.cold"),
            Match::Name);
}

TEST(SymbolNames, ProbeSpecsWithCxxNames) {
  auto scoped = parse_probe("ns::Klass::method");
  EXPECT_EQ(scoped.module, "");
  EXPECT_EQ(scoped.symbol, "ns::Klass::method");
  auto in_module = parse_probe("libfoo.so.1:ns::Klass::method(long)+0x4");
  EXPECT_EQ(in_module.module, "libfoo.so.1");
  EXPECT_EQ(in_module.symbol, "ns::Klass::method(long)");
  EXPECT_EQ(in_module.offset, 4u);
  EXPECT_EQ(parse_probe("f[abi:cxx11]()").symbol, "f[abi:cxx11]()");
  EXPECT_EQ(parse_probe("A::operator+(A const&)").symbol, "A::operator+(A const&)");
  EXPECT_EQ(parse_probe("A::operator+(A const&)+16").offset, 16u);
  EXPECT_EQ(parse_probe("memcpy@GLIBC_2.2.5").symbol, "memcpy@GLIBC_2.2.5");
  for (const char* bad : {":ns::f", "ns::f+", "ns::f+x", "libc.so.6:"}) {
    EXPECT_THROW(parse_probe(bad), UsageError) << bad;
  }
}

namespace {

// glibc's own file, through libelf: its .dynsym, .gnu.version and .gnu.version_d.
struct LibcFile {
  LibcFile() {
    elf_version(EV_CURRENT);
    for (const char* path :
         {"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"}) {
      fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) break;
    }
    elf = fd >= 0 ? elf_begin(fd, ELF_C_READ, nullptr) : nullptr;
  }
  ~LibcFile() {
    if (elf) elf_end(elf);
    if (fd >= 0) ::close(fd);
  }
  // Every .dynsym value of a function called `name`, whatever its version.
  std::vector<GElf_Addr> values_of(const std::string& name) const {
    std::vector<GElf_Addr> out;
    for (auto& [scn, shdr] : sections_of_type(elf, SHT_DYNSYM)) {
      for_each_symbol(elf, scn, shdr, [&](std::size_t, const char* n, const GElf_Sym& sym) {
        if (name == n && sym.st_shndx != SHN_UNDEF) out.push_back(sym.st_value);
      });
    }
    return out;
  }
  int fd = -1;
  Elf* elf = nullptr;
};

}  // namespace

// memcpy has two definitions in glibc's .dynsym: the default version, GLIBC_2.14, and the old
// one, GLIBC_2.2.5, which libdwfl gives under one plain name.
TEST(SymbolNames, VersionsAndSonameOfGlibc) {
  LibcFile libc;
  ASSERT_NE(libc.elf, nullptr) << "no libc.so.6";
  EXPECT_EQ(soname_of(libc.elf), "libc.so.6");
  constexpr GElf_Addr kBias = 0x7f0000000000;
  SymbolVersions versions(libc.elf, kBias);
  auto memcpy = libc.values_of("memcpy");
  ASSERT_EQ(memcpy.size(), 2u);
  std::map<std::string, int> seen;
  for (GElf_Addr v : memcpy) ++seen[versions.decorate("memcpy", RuntimeAddr(v + kBias))];
  EXPECT_EQ(seen["memcpy@@GLIBC_2.14"], 1);
  EXPECT_EQ(seen["memcpy@GLIBC_2.2.5"], 1);
  // Not at that address, or versioned already: as it is.
  EXPECT_EQ(versions.decorate("memcpy", RuntimeAddr(1)), "memcpy");
  EXPECT_EQ(versions.decorate("memcpy@X", RuntimeAddr(memcpy[0] + kBias)), "memcpy@X");
  auto malloc = libc.values_of("malloc");
  ASSERT_EQ(malloc.size(), 1u);
  EXPECT_EQ(versions.decorate("malloc", RuntimeAddr(malloc[0] + kBias)), "malloc@@GLIBC_2.2.5");
}
