// Whether a jump may go where a plan says: every way a thread could arrive at a byte of the
// patched range other than its first, beyond what plan_jump sees in the function itself.
#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "breakpoint/x86/code_walk.hpp"
#include "common/error.hpp"
#include "tracer/jump/jump_probes.hpp"
#include "tracer/jump/module_code.hpp"
#include "tracer/os/signal_frames.hpp"

namespace probecost {

namespace {

constexpr int kThreadAttempts = 8;
// Instructions decoded from a PC in code no file holds: a copy's way back is within a few, a
// trampoline's within some hundreds.
constexpr std::size_t kMaxWalk = 1024;

const Mapping* mapping_of(const std::vector<Mapping>& maps, RuntimeAddr at) {
  for (const auto& m : maps) {
    if (m.contains(at)) return &m;
  }
  return nullptr;
}

// The end of the memory a stack at `rsp` may go on in: its mapping and those right above it
// while writable. A stack, or an alternate signal stack, is not always one mapping: the kernel
// splits a mapping where a part's flags differ (an madvise(MADV_DONTDUMP) on the upper half of
// a sigaltstack, an mprotect, an mlock), and a handler whose locals took RSP into the lower part
// had its frame, in the upper, unseen (a jump then went over the bytes it returned into:
// SIGSEGV). Not on into a read-only mapping (a library's first segment, often right above a
// thread's stack): no stack goes on there. Nothing when no mapping holds `rsp`.
std::optional<std::uint64_t> stack_end(const std::vector<Mapping>& maps, RuntimeAddr rsp) {
  auto m =
      std::find_if(maps.begin(), maps.end(), [&](const Mapping& x) { return x.contains(rsp); });
  if (m == maps.end()) return std::nullopt;
  RuntimeAddr end = m->end;
  for (++m; m != maps.end() && m->start == end && m->read && m->write; ++m) end = m->end;
  return end.value();
}

bool file_backed(const Mapping* m) {
  return m && !m->path.empty() && m->path[0] == '/';
}

std::string inside(const JumpPlan& plan) {
  return "inside the " + std::to_string(plan.length) + " bytes the jump would replace";
}

}  // namespace

// Our own bytes (int3, jumps) in `bytes`, read from `at`, replaced by the originals.
void JumpProbes::undo_our_bytes(RuntimeAddr at, std::span<std::uint8_t> bytes) {
  auto put = [&](RuntimeAddr where, std::span<const std::uint8_t> original) {
    for (std::size_t i = 0; i < original.size(); ++i) {
      std::int64_t off = (where + static_cast<std::int64_t>(i)) - at;
      if (off >= 0 && off < static_cast<std::int64_t>(bytes.size()))
        bytes[static_cast<std::size_t>(off)] = original[i];
    }
  };
  for (const auto& s : proc_.space().sites()) {
    std::uint8_t saved = s->saved_byte();
    if (s->enabled()) put(s->address(), {&saved, 1});
  }
  for (const auto& p : proc_.space().patches()) {
    if (p->installed()) put(p->address(), p->patch().original_bytes());
  }
}

std::shared_ptr<const ModuleCode> JumpProbes::module_of(const Mapping& m, std::string& why) {
  if (modules_at_ != Task::resumes()) modules_.clear();
  modules_at_ = Task::resumes();
  std::string id = m.start.hex() + "-" + m.end.hex() + " " + std::to_string(m.offset) + " " +
                   m.file_id + " " + m.path;
  if (auto it = modules_.find(id); it != modules_.end()) return it->second;
  auto module = ModuleCode::of(proc_.proc_tid(), m, why);
  if (module) modules_.emplace(id, module);
  return module;
}

// The function's code from its module's file; from memory, less our bytes, for code with no
// file (or whose file cannot be read: then why_module() refuses the site anyway).
std::vector<std::uint8_t> JumpProbes::original_code(const Symbol& function,
                                                    const std::vector<Mapping>& maps) {
  std::vector<std::uint8_t> code(function.size);
  const Mapping* m = mapping_of(maps, function.address);
  std::string no;
  if (file_backed(m)) {
    if (auto module = module_of(*m, no)) {
      auto bias = module->bias(*m);
      if (bias && module->read(bias->unapply(function.address), code)) return code;
    }
  }
  proc_.memory().read(function.address, code);
  undo_our_bytes(function.address, code);
  return code;
}

std::optional<JumpPlan> JumpProbes::plan(RuntimeAddr site, const ProcessSymbols& symbols,
                                         const std::vector<Mapping>& maps, std::string& why) {
  auto function = symbols.sized_function_containing(site);
  if (!function) {
    why = "no function symbol with a size covers " + site.hex() +
          ", so the code around it cannot be checked";
    return std::nullopt;
  }
  auto plan = plan_jump(function->address, original_code(*function, maps), site, why);
  if (!plan) return plan;
  // The process must still hold what the plan was made from, but for our own bytes.
  std::vector<std::uint8_t> now(plan->length);
  proc_.memory().read(site, now);
  undo_our_bytes(site, now);
  if (!std::equal(now.begin(), now.end(), plan->original_bytes().begin())) {
    why = "the bytes at " + site.hex() + " are not those of " + function->module +
          ": something changed them (another tool's breakpoint, or bytes left by a probecost "
          "that was killed: 'probecost restore -p " +
          std::to_string(proc_.pid()) + "')";
    return std::nullopt;
  }
  return plan;
}

std::string JumpProbes::why_other_probe(
    const JumpPlan& plan, const std::vector<std::pair<RuntimeAddr, std::string>>& probes) {
  for (const auto& [at, label] : probes) {
    if (plan.site < at && at < plan.end()) {
      // An int3 there would be inside the jmp, and a thread never reaches it: int3 for both.
      return "the probe at " + at.hex() + " (" + label + ") is " + inside(plan);
    }
  }
  return {};
}

// Direct branches from anywhere in the site's module, and the landing pads of its exception
// tables, inside the bytes to patch: the reason, or empty.
std::string JumpProbes::why_module(const JumpPlan& plan, const ProcessSymbols& symbols,
                                   const std::vector<Mapping>& maps) {
  const Mapping* m = mapping_of(maps, plan.site);
  if (!file_backed(m)) return {};  // anonymous code: no module to index
  std::string no;
  auto module = module_of(*m, no);
  if (!module) {
    return "the module's file cannot be read (" + no +
           "), so branches into the bytes to patch cannot be ruled out";
  }
  auto bias = module->bias(*m);
  if (!bias) return "where " + m->path + " is mapped does not match its program headers";
  FileAddr lo = bias->unapply(plan.site), hi = bias->unapply(plan.end());
  auto from = module->branches().into(lo + 1, hi, lo, hi);
  if (!from.empty()) {
    return "a direct branch at " + symbols.describe(bias->apply(from.front())) +
           ", outside the function, lands " + inside(plan);
  }
  if (auto pad = module->landing_pad_in(lo + 1, hi)) {
    return "the landing pad at " + bias->apply(pad->pad).hex() +
           ", where the unwinder sends exceptions thrown from calls at " +
           symbols.describe(bias->apply(pad->call_site)) + ", is " + inside(plan);
  }
  if (auto why = module->unknown_pads_in(lo, hi); !why.empty()) {
    return "the exception tables of " + m->path + " cannot all be read (" + why +
           "): a landing pad could be " + inside(plan);
  }
  return {};
}

// Our probes already in the process (an earlier image's, or an earlier call's).
std::string JumpProbes::why_installed(const JumpPlan& plan) {
  for (const auto& s : proc_.space().sites()) {
    if (s->enabled() && plan.site <= s->address() && s->address() < plan.end()) {
      return "an int3 probe is at " + s->address().hex() + ", " + inside(plan);
    }
  }
  for (const auto& p : proc_.space().patches()) {
    if (p->installed() && p->address() < plan.end() &&
        plan.site < p->address() + static_cast<std::int64_t>(p->patch().length)) {
      return "the jump probe at " + p->address().hex() + " overlaps the bytes to patch";
    }
  }
  return {};
}

// Every stopped thread's RIP, and the RIPs saved in the signal frames on its stack: where its
// handlers return to. Found by unwinding with libunwind (unw_is_signal_frame), as a debugger's
// backtrace shows "<signal handler called>", on a stack that may hold a signal frame at all.
std::vector<JumpProbes::ThreadPc> JumpProbes::thread_pcs() {
  bool flushed = false;
  std::vector<ThreadPc> out;
  auto maps = proc_.maps();
  for (auto& [tid, t] : proc_.threads()) {
    if (!t.stopped()) continue;  // in the kernel (vfork, exit): not in user code
    const user_regs_struct* regs = t.regs();
    if (!regs) continue;
    out.push_back({tid, RuntimeAddr(regs->rip), false, {}});
    // A stack whose used part holds no signal frame's mark needs no walk (signal_frames.hpp).
    auto end = stack_end(maps, RuntimeAddr(regs->rsp));
    if (end && holds_no_signal_frame(tid, regs->rsp, *end)) continue;
    // Made when first needed: libunwind's address space alone took 1.4 ms of CPU here.
    if (!unwinder_) unwinder_ = std::make_unique<StackCollector>(kSignalWalkFrames);
    if (!std::exchange(flushed, true)) unwinder_->flush();  // code mapped since the last walk
    for (auto pc : unwinder_->interrupted_pcs(tid)) out.push_back({tid, RuntimeAddr(pc), true, {}});
  }
  if (out.empty()) return out;
  std::map<std::uint64_t, std::vector<RuntimeAddr>> walked;  // threads parked at one PC
  for (auto& p : out) {
    auto it = walked.find(p.pc.value());
    if (it == walked.end()) it = walked.emplace(p.pc.value(), exits_of(p.pc, maps)).first;
    p.exits = it->second;
  }
  return out;
}

// A PC in executable code that no module's file holds: anonymous memory, or a memfd (ours are
// "/memfd:probecost-jump"; a JIT may double-map its code from one). Whatever it is, it may jump
// into the middle of a range we would patch: a previous probecost's copy does, to the
// instruction after the one it copied. Code of a real file is covered by its branch index.
std::vector<RuntimeAddr> JumpProbes::exits_of(RuntimeAddr pc, const std::vector<Mapping>& maps) {
  const Mapping* m = mapping_of(maps, pc);
  if (!m || !m->exec || (file_backed(m) && m->path.rfind("/memfd:", 0) != 0)) return {};
  return exits_from(proc_.memory(), pc, m->start, m->end, kMaxWalk);
}

std::string JumpProbes::why_thread(const JumpPlan& plan, const std::vector<ThreadPc>& pcs) {
  auto strictly_inside = [&](RuntimeAddr at) { return plan.site < at && at < plan.end(); };
  for (const auto& p : pcs) {
    std::string tid = "thread " + std::to_string(p.tid);
    std::string where = p.interrupted
                            ? tid + " is in a signal handler that returns to " + p.pc.hex()
                            : tid + " is at " + p.pc.hex();
    if (strictly_inside(p.pc)) return where + ", " + inside(plan);
    auto in = std::find_if(p.exits.begin(), p.exits.end(), strictly_inside);
    if (in != p.exits.end()) {
      return where +
             ", in code no file holds (a scratch page or trampoline another probecost "
             "left, or JIT code), which jumps to " +
             in->hex() + ", " + inside(plan);
    }
  }
  return {};
}

void JumpProbes::let_threads_move() {
  std::vector<pid_t> held;
  for (auto& [tid, t] : proc_.threads()) {
    if (t.stopped() && !t.deferred && t.runs_with_us()) held.push_back(tid);
  }
  proc_.resume_stopped(held);
  // Anything they report meanwhile (a hit on an int3 probe already in) is kept for the
  // event loop; only the interrupts' own stops are taken here.
  proc_.stop_all(0);
}

void JumpProbes::check_threads(std::vector<Candidate>& cands, std::vector<std::string>& why) {
  // A thread caught inside a range is usually passing through: let everyone run a moment and
  // look again, a few times, before refusing (Orbit retries the same way). One parked in a
  // signal handler that returns into the range stays (blocked in a read, say).
  for (int attempt = 0; !cands.empty(); ++attempt) {
    auto pcs = thread_pcs();
    bool caught = false;
    for (const auto& c : cands) caught |= !(why[c.request] = why_thread(*c.plan, pcs)).empty();
    if (!caught) return;
    if (attempt == kThreadAttempts) break;
    let_threads_move();
  }
  std::erase_if(cands, [&](const Candidate& c) {
    if (why[c.request].empty()) return false;
    why[c.request] += " (still after " + std::to_string(kThreadAttempts) + " tries)";
    return true;
  });
}

}  // namespace probecost
