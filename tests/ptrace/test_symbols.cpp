// ProcessSymbols in live processes: symbol versions of glibc's memcpy with and without detached
// debug info (CTest runs these tests both ways), C++ overload sets, and modules named by file
// name, SONAME or path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.hpp"
#include "run_capture.hpp"
#include "tracer/core/family.hpp"
#include "tracer/symbols/cxx_names.hpp"
#include "tracer/symbols/symbols.hpp"

using namespace probecost;

namespace {

// A launched process (a family of one), stopped at its entry point with its start-up
// libraries loaded.
std::unique_ptr<Family> at_entry(std::vector<std::string> argv) {
  LaunchSpec spec;
  spec.argv = std::move(argv);
  auto family = Family::launch(spec);
  family->root().run_to_entry();
  return family;
}

// The CannotProbe `f` throws, as text ("" when it throws none).
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const CannotProbe& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> demangled(const std::vector<Symbol>& symbols) {
  std::vector<std::string> out;
  for (const auto& s : symbols) out.push_back(demangle(s.name));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// .dynsym has memcpy twice: memcpy@@GLIBC_2.14, the IFUNC a program linked today calls, and
// memcpy@GLIBC_2.2.5, kept for old programs. A bare name is the default version, with or
// without libc6-dbg's .symtab.
TEST(Symbols, ABareNameIsTheDefaultVersionAndNameAtVersionPicksAnother) {
  auto proc = at_entry({LOOP_TARGET_PIE, "1", "1"});
  ProcessSymbols symbols(proc->root().pid());
  Symbol memcpy = symbols.resolve("memcpy", "libc.so.6");
  EXPECT_TRUE(memcpy.ifunc);
  EXPECT_EQ(memcpy.name, "memcpy@@GLIBC_2.14");
  Symbol old = symbols.resolve("memcpy@GLIBC_2.2.5", "libc.so.6");
  EXPECT_FALSE(old.ifunc);
  EXPECT_EQ(old.name, "memcpy@GLIBC_2.2.5");
  EXPECT_NE(old.address, memcpy.address);
  EXPECT_EQ(symbols.resolve("memcpy@@GLIBC_2.14", "libc.so.6").address, memcpy.address);
  EXPECT_EQ(symbols.resolve("memcpy@GLIBC_2.14", "libc.so.6").address, memcpy.address);
  EXPECT_NE(refusal([&] {
              symbols.resolve("memcpy@GLIBC_9.9", "libc.so.6");
            }).find("no function symbol 'memcpy@GLIBC_9.9' in module 'libc.so.6'"),
            std::string::npos);
  // Names without versions stay plain: malloc has one version, and the executable none.
  EXPECT_EQ(symbols.find("probecost_test_site").at(0).name, "probecost_test_site");
}

TEST(Symbols, ACxxNameIsEveryOverloadOfOneFunction) {
  auto proc = at_entry({CXX_NAMES, "0"});
  ProcessSymbols symbols(proc->root().pid());
  EXPECT_EQ(demangled(symbols.resolve_all("middle")),
            (std::vector<std::string>{"middle(double)", "middle(int)", "middle(long)"}));
  EXPECT_EQ(demangled(symbols.resolve_all("ns::Klass::method")),
            (std::vector<std::string>{"ns::Klass::method() const", "ns::Klass::method(long)"}));
  // gdb's wild matching: the last part of the name alone, where it names one function.
  EXPECT_EQ(symbols.resolve_all("method").size(), 2u);
  EXPECT_EQ(demangle(symbols.resolve("middle(long)").name), "middle(long)");
  EXPECT_EQ(demangle(symbols.resolve("Klass::method() const").name), "ns::Klass::method() const");
  EXPECT_EQ(symbols.resolve("_Z6middlei").name, "_Z6middlei");
  // One function wanted, several named: the error lists them.
  std::string overloaded = refusal([&] { symbols.resolve("middle"); });
  EXPECT_NE(overloaded.find("is overloaded"), std::string::npos) << overloaded;
  EXPECT_NE(overloaded.find("middle(double)"), std::string::npos) << overloaded;
  std::string twins = refusal([&] { symbols.resolve_all("twin"); });
  EXPECT_NE(twins.find("names several functions"), std::string::npos) << twins;
  EXPECT_NE(twins.find("a::twin()"), std::string::npos) << twins;
  EXPECT_NE(twins.find("b::twin()"), std::string::npos) << twins;
  EXPECT_EQ(symbols.resolve_all("a::twin").size(), 1u);
  // --list matches the demangled name too.
  EXPECT_EQ(demangled(symbols.list("ns::Klass::*")),
            (std::vector<std::string>{"ns::Klass::method() const", "ns::Klass::method(long)"}));
}

TEST(Symbols, AModuleIsNamedByFileNameSonameOrPath) {
  auto proc = at_entry({CXX_NAMES, "0"});
  ProcessSymbols symbols(proc->root().pid());
  Symbol by_soname = symbols.resolve("probecost_soname_site", "libprobecost_soname.so.1");
  Symbol by_file = symbols.resolve("probecost_soname_site", "libprobecost_soname.so.1.2.3");
  EXPECT_EQ(by_soname.address, by_file.address);
  EXPECT_NE(by_file.module.find("libprobecost_soname.so.1.2.3"), std::string::npos);
  EXPECT_EQ(symbols.resolve("probecost_soname_site", by_file.module).address, by_file.address);
  // Another path of the same file: the symbolic link the dynamic loader opened.
  std::string link =
      by_file.module.substr(0, by_file.module.rfind('/')) + "/libprobecost_soname.so.1";
  EXPECT_EQ(symbols.resolve("probecost_soname_site", link).address, by_file.address);
  EXPECT_TRUE(symbols.has_module("libc.so.6"));
  EXPECT_FALSE(symbols.has_module("libprobecost_soname.so"));
  // An unknown module has its own error, which names the modules there are.
  try {
    symbols.resolve("probecost_soname_site", "libprobecost_soname.so");
    FAIL() << "resolve should have thrown";
  } catch (const UnknownModule& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("no module 'libprobecost_soname.so' in process " +
                        std::to_string(proc->root().pid())),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("libprobecost_soname.so.1.2.3"), std::string::npos) << what;
    EXPECT_EQ(what.find("no function symbol"), std::string::npos) << what;
  }
}

// A refresh once the process is gone (trace's stacks are named after its end) fails, and the
// modules read before stay: before, it left no Dwfl at all, and the next describe() read a
// wild pointer (a SIGSEGV of probecost at the end of `trace --stacks` on sort).
TEST(Symbols, ARefreshAfterTheProcessIsGoneKeepsTheModules) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (;;) pause();  // its maps are ours, as fork left them, until it is killed
  }
  std::string before;
  RuntimeAddr at(reinterpret_cast<std::uintptr_t>(&::getpid));
  {
    ProcessSymbols symbols(child);
    before = symbols.describe(at);
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_THROW(symbols.refresh(), Error);
    EXPECT_EQ(symbols.describe(at), before);
  }
  EXPECT_NE(before.find("libc.so.6"), std::string::npos) << before;
}
