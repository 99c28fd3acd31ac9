// Issue 15 item 2: C++ landing pads are branch targets. awkward_catch is built -O0, so the pad
// of its catch follows the try block's jmp in the function's own body: the reader must find it
// in the file, a jump must not cover it, and a throw must land where it always did.
#include <fcntl.h>
#include <gelf.h>
#include <gtest/gtest.h>

#include "awkward_harness.hpp"
#include "breakpoint/jump/jump_plan.hpp"
#include "tracer/jump/module_code.hpp"

using namespace probecost;
using namespace probecost::test;

namespace {

class LandingPads : public ::testing::TestWithParam<std::string> {};

const std::string kCatch = "awkward_catch";

// awkward_catch of a live target, in the file's addresses, and the module's tables.
struct Catch {
  std::shared_ptr<const ModuleCode> module;
  FileAddr start;
  std::uint64_t size = 0;
  std::optional<LandingPad> pad;
};

Catch find_catch(pid_t pid) {
  Catch c;
  Symbol f = ProcessSymbols(pid).resolve(kCatch);
  for (const auto& m : read_maps(pid)) {
    if (!m.contains(f.address)) continue;
    std::string why;
    c.module = ModuleCode::of(pid, m, why);
    EXPECT_TRUE(c.module) << why;
    if (!c.module) return c;
    auto bias = c.module->bias(m);
    EXPECT_TRUE(bias);
    if (!bias) return c;
    c.start = bias->unapply(f.address);
    c.size = f.size;
    c.pad = c.module->landing_pad_in(c.start, c.start + static_cast<std::int64_t>(c.size));
  }
  return c;
}

// Offsets in awkward_catch of the boundaries whose jump, were landing pads not branch targets,
// would cover the pad: plan_jump alone accepts them.
std::vector<std::uint64_t> sites_over(const Catch& c) {
  std::vector<std::uint8_t> code(c.size);
  EXPECT_TRUE(c.module->read(c.start, code));
  std::vector<std::uint64_t> out;
  RuntimeAddr start(c.start.value());  // planned in the file's addresses
  for (std::size_t off = 0; off < code.size();) {
    auto in = decode(std::span(code).subspan(off), start + static_cast<std::int64_t>(off));
    if (!in) break;
    std::string why;
    auto plan = plan_jump(start, code, in->address, why);
    if (plan && plan->site.value() < c.pad->pad.value() && c.pad->pad.value() < plan->end().value())
      out.push_back(off);
    off += in->length;
  }
  return out;
}

}  // namespace

TEST_P(LandingPads, TheReaderFindsThePadOfTheCatchInsideTheFunction) {
  Target target(GetParam(), 1);
  Catch c = find_catch(target.pid);
  ASSERT_TRUE(c.pad);
  EXPECT_GT(c.pad->pad, c.pad->call_site);  // the call to __cxa_throw comes first
  EXPECT_EQ(c.module->unknown_pads_in(c.start, c.start + static_cast<std::int64_t>(c.size)), "");
  EXPECT_FALSE(sites_over(c).empty())
      << "no site whose jump would cover the pad: the tests would prove nothing";
}

TEST_P(LandingPads, AJumpOverAPadIsRefusedAndEveryThrowLandsAsUntraced) {
  Target target(GetParam(), 1);
  Catch c = find_catch(target.pid);
  ASSERT_TRUE(c.pad);
  auto over = sites_over(c);
  ASSERT_FALSE(over.empty());
  std::vector<std::string> command = {GetParam(), "catch", "30"};
  auto untraced = run_command(command);
  ASSERT_EQ(untraced.out, "catch=165 caught=10\n");
  for (auto off : over) {
    std::string site = spec(kCatch, off);
    auto t = trace_launched({"-b", site, "-b", "__cxa_throw"}, command);
    ASSERT_EQ(t.run.exit_code, 0) << site << ": " << t.run.err;
    EXPECT_EQ(t.run.out, untraced.out) << site;
    EXPECT_EQ(hits_of(t.report, "__cxa_throw"), 10) << site;
    const Json& p = probe_of(t.report, site);
    EXPECT_EQ(p["via"], "int3") << site;
    EXPECT_NE(p["why_not_jump"].get<std::string>().find("the landing pad at "), std::string::npos)
        << p["why_not_jump"];
  }
}

TEST_P(LandingPads, EveryBoundaryOfTheFunctionOneAtATimeRunsAsUntraced) {
  Target target(GetParam(), 1);
  auto offsets = boundaries(target.pid, kCatch);
  std::vector<std::string> command = {GetParam(), "catch", "30"};
  auto args = probe_args(kCatch, offsets);
  args.insert(args.end(), {"--via", "int3"});
  auto reference = trace_launched(args, command);
  ASSERT_EQ(reference.run.exit_code, 0) << reference.run.err;
  std::size_t jumps = 0;
  for (auto off : offsets) {
    auto t = trace_launched({"-b", spec(kCatch, off)}, command);
    ASSERT_EQ(t.run.exit_code, 0) << off << ": " << t.run.err;
    EXPECT_EQ(t.run.out, reference.run.out) << off;
    EXPECT_EQ(hits_of(t.report, spec(kCatch, off)), hits_of(reference.report, spec(kCatch, off)))
        << off;
    jumps += probe_of(t.report, spec(kCatch, off))["via"] == "jump";
  }
  std::printf("%s: %zu boundaries one at a time, %zu of them jumps\n", kCatch.c_str(),
              offsets.size(), jumps);
}

TEST(EhTables, TruncatedOrCorruptTablesAreReadWithoutStrayingOutside) {
  // Every prefix of the target's .eh_frame, and each byte of it flipped: no read outside the
  // bytes given (ASan would say), and never a pad outside the sections.
  int fd = ::open(AWKWARD_PIE, O_RDONLY | O_CLOEXEC);
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  ASSERT_TRUE(elf);
  std::size_t shstrndx = 0;
  elf_getshdrstrndx(elf, &shstrndx);
  std::vector<std::uint8_t> eh, except;
  std::uint64_t eh_at = 0, except_at = 0;
  for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn));) {
    GElf_Shdr sh;
    gelf_getshdr(scn, &sh);
    Elf_Data* d = elf_rawdata(scn, nullptr);
    std::string name = elf_strptr(elf, shstrndx, sh.sh_name);
    auto* b = static_cast<const std::uint8_t*>(d->d_buf);
    if (name == ".eh_frame") eh.assign(b, b + d->d_size), eh_at = sh.sh_addr;
    if (name == ".gcc_except_table") except.assign(b, b + d->d_size), except_at = sh.sh_addr;
  }
  elf_end(elf);
  ::close(fd);
  ASSERT_FALSE(eh.empty());
  ASSERT_FALSE(except.empty());
  std::vector<LoadedBytes> sections = {{FileAddr(except_at), except}};
  auto whole = read_eh_tables({FileAddr(eh_at), eh}, sections, false);
  EXPECT_GE(whole.lsdas, 1u);
  EXPECT_GE(whole.pads.size(), 1u);
  EXPECT_TRUE(whole.unknown.empty()) << whole.why_unknown;
  for (std::size_t n = 0; n < eh.size(); ++n) {
    std::vector<std::uint8_t> prefix(eh.begin(), eh.begin() + static_cast<std::ptrdiff_t>(n));
    read_eh_tables({FileAddr(eh_at), prefix}, sections, false);
    auto flipped = eh;
    flipped[n] ^= 0xff;
    read_eh_tables({FileAddr(eh_at), flipped}, sections, false);
  }
  for (std::size_t n = 0; n < except.size(); ++n) {
    std::vector<std::uint8_t> cut(except.begin(), except.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<LoadedBytes> short_sections = {{FileAddr(except_at), cut}};
    auto t = read_eh_tables({FileAddr(eh_at), eh}, short_sections, false);
    // An LSDA cut short is unknown, never read past the cut.
    EXPECT_LE(t.pads.size(), whole.pads.size()) << n;
    if (n == 0) {
      EXPECT_FALSE(t.unknown.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, LandingPads, ::testing::Values(AWKWARD_PIE, AWKWARD_NOPIE),
                         [](const auto& info) { return info.index == 0 ? "Pie" : "NonPie"; });
