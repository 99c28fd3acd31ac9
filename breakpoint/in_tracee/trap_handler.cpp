#include "breakpoint/in_tracee/trap_handler.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>

#include <cstddef>
#include <map>

#include "breakpoint/int3/outline.hpp"
#include "breakpoint/x86/x86_asm.hpp"
#include "common/error.hpp"

namespace probecost::trap {

namespace {

using namespace x86;

constexpr auto RAX = ZYDIS_REGISTER_RAX, RDX = ZYDIS_REGISTER_RDX, RSI = ZYDIS_REGISTER_RSI,
               RDI = ZYDIS_REGISTER_RDI, RSP = ZYDIS_REGISTER_RSP, R8 = ZYDIS_REGISTER_R8,
               R10 = ZYDIS_REGISTER_R10, R11 = ZYDIS_REGISTER_R11, EAX = ZYDIS_REGISTER_EAX,
               ECX = ZYDIS_REGISTER_ECX, EDX = ZYDIS_REGISTER_EDX, EDI = ZYDIS_REGISTER_EDI,
               ESI = ZYDIS_REGISTER_ESI, R9D = ZYDIS_REGISTER_R9D, R10D = ZYDIS_REGISTER_R10D;

// Where the kernel's signal frame keeps what the handler looks at (x86-64 ucontext_t and
// siginfo_t, the same layout in glibc and the kernel up to uc_sigmask's first 8 bytes).
constexpr std::int64_t kUcRip = offsetof(ucontext_t, uc_mcontext.gregs) + REG_RIP * 8;
constexpr std::int64_t kUcFlags = offsetof(ucontext_t, uc_mcontext.gregs) + REG_EFL * 8;
constexpr std::int64_t kUcSigmask = offsetof(ucontext_t, uc_sigmask);
constexpr std::int64_t kSiCode = offsetof(siginfo_t, si_code);
constexpr std::int64_t kTrapFlag = 0x100;

// One pass of the generator. Labels are resolved by assembling twice: every branch is rel32,
// so the second pass, with the first pass's label addresses, has the same lengths.
class Gen {
 public:
  Gen(RuntimeAddr area, const Layout& layout, const std::map<std::string, RuntimeAddr>& known)
      : a_(area + static_cast<std::int64_t>(layout.code_offset)),
        area_(area),
        layout_(layout),
        known_(known) {}

  HandlerCode run() {
    HandlerCode code;
    label("handler");
    sites();
    chain();
    label("restorer");
    syscall(SYS_rt_sigreturn);
    a_.must(ZYDIS_MNEMONIC_UD2, {});
    code.bytes = a_.bytes();
    code.handler_offset = static_cast<std::uint64_t>(at("handler") - start());
    code.restorer_offset = static_cast<std::uint64_t>(at("restorer") - start());
    code.calls = std::move(calls_);
    return code;
  }
  const std::map<std::string, RuntimeAddr>& labels() const { return labels_; }

 private:
  RuntimeAddr start() const { return area_ + static_cast<std::int64_t>(layout_.code_offset); }
  void label(const std::string& name) { labels_[name] = a_.here(); }
  RuntimeAddr at(const std::string& name) const {
    auto it = known_.find(name);
    return it == known_.end() ? start() : it->second;
  }
  void jump(ZydisMnemonic m, const std::string& to) {
    if (!a_.branch32(m, at(to))) throw Error("trap handler: branch out of reach");
  }
  ZydisEncoderOperand header(std::size_t offset, std::uint16_t size = 8) {
    return rip(area_ + static_cast<std::int64_t>(offset), size);
  }
  void mov(ZydisRegister r, std::int64_t v) { a_.must(ZYDIS_MNEMONIC_MOV, {reg(r), imm(v)}); }
  // syscall with its number in eax; recorded for the seccomp check.
  void syscall(long nr) {
    mov(EAX, nr);
    calls_.push_back({nr, static_cast<std::uint64_t>(a_.here() - start())});
    a_.must(ZYDIS_MNEMONIC_SYSCALL, {});
  }
  void sites();
  void site_matches();
  void chain();
  void call_program_handler();
  void default_action();

  Assembler a_;
  RuntimeAddr area_;
  Layout layout_;
  const std::map<std::string, RuntimeAddr>& known_;
  std::map<std::string, RuntimeAddr> labels_;
  std::vector<HandlerCode::Call> calls_;
};

// Entry: %rdi = SIGTRAP, %rsi = siginfo, %rdx = ucontext. %eax = si_code, %r8 = the RIP the
// thread trapped with; %r10 walks the records, %ecx counts them down.
void Gen::sites() {
  a_.must(ZYDIS_MNEMONIC_ENDBR64, {});
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(EAX), mem(RSI, kSiCode, 4)});
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R8), mem(RDX, kUcRip)});
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(ECX), header(offsetof(TrapHeader, record_count), 4)});
  a_.must(ZYDIS_MNEMONIC_LEA, {reg(R10), header(layout_.records_offset)});
  label("loop");
  a_.must(ZYDIS_MNEMONIC_TEST, {reg(ECX), reg(ECX)});
  jump(ZYDIS_MNEMONIC_JZ, "chain");
  a_.must(ZYDIS_MNEMONIC_CMP, {mem(R10, offsetof(TrapRecord, state), 1), imm(kInstalled)});
  jump(ZYDIS_MNEMONIC_JNZ, "next");
  site_matches();
  label("next");
  a_.must(ZYDIS_MNEMONIC_ADD, {reg(R10), imm(sizeof(TrapRecord))});
  a_.must(ZYDIS_MNEMONIC_DEC, {reg(ECX)});
  jump(ZYDIS_MNEMONIC_JMP, "loop");
  // The tracer had moved this thread on and died before resuming it: its trap is spent. A
  // single-step's trap flag, which nobody will clear now, goes.
  label("moved");
  a_.must(ZYDIS_MNEMONIC_AND, {mem(RDX, kUcFlags), imm(~kTrapFlag)});
  a_.must(ZYDIS_MNEMONIC_RET, {});
}

// One record at %r10: a hit on its int3 (SI_KERNEL, RIP one past the site) resumes at its
// copy; a pending trap of a thread the tracer had moved (SI_KERNEL or a single-step's
// TRAP_TRACE, RIP on the site or at a moved address) is spent.
void Gen::site_matches() {
  a_.must(ZYDIS_MNEMONIC_CMP, {reg(EAX), imm(SI_KERNEL)});
  jump(ZYDIS_MNEMONIC_JNZ, "not_int3");
  a_.must(ZYDIS_MNEMONIC_LEA, {reg(R11), mem(R8, -1)});
  a_.must(ZYDIS_MNEMONIC_CMP, {reg(R11), mem(R10, offsetof(TrapRecord, site))});
  jump(ZYDIS_MNEMONIC_JNZ, "spent");
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R11), mem(R10, offsetof(TrapRecord, resume))});
  a_.must(ZYDIS_MNEMONIC_TEST, {reg(R11), reg(R11)});
  jump(ZYDIS_MNEMONIC_JZ, "chain");  // no copy: what would have happened without us
  a_.must(ZYDIS_MNEMONIC_MOV, {mem(RDX, kUcRip), reg(R11)});
  a_.must(ZYDIS_MNEMONIC_RET, {});
  label("not_int3");
  a_.must(ZYDIS_MNEMONIC_CMP, {reg(EAX), imm(TRAP_TRACE)});
  jump(ZYDIS_MNEMONIC_JNZ, "next");
  label("spent");
  a_.must(ZYDIS_MNEMONIC_CMP, {reg(R8), mem(R10, offsetof(TrapRecord, site))});
  jump(ZYDIS_MNEMONIC_JZ, "moved");
  for (int i = 0; i < 3; ++i) {
    a_.must(ZYDIS_MNEMONIC_CMP,
            {reg(R8), mem(R10, static_cast<std::int64_t>(offsetof(TrapRecord, moved) + 8 * i))});
    jump(ZYDIS_MNEMONIC_JZ, "moved");
  }
}

// Not ours: the program's disposition, %eax still si_code.
void Gen::chain() {
  label("chain");
  constexpr auto program = offsetof(TrapHeader, program);
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R11), header(program + offsetof(KernelSigaction, handler))});
  a_.must(ZYDIS_MNEMONIC_CMP, {reg(R11), imm(1)});  // SIG_IGN
  jump(ZYDIS_MNEMONIC_JZ, "ignored");
  a_.must(ZYDIS_MNEMONIC_TEST, {reg(R11), reg(R11)});  // SIG_DFL
  jump(ZYDIS_MNEMONIC_JZ, "default");
  call_program_handler();
  label("ignored");
  a_.must(ZYDIS_MNEMONIC_CMP, {reg(EAX), imm(SI_KERNEL)});
  jump(ZYDIS_MNEMONIC_JZ, "default");
  a_.must(ZYDIS_MNEMONIC_TEST, {reg(EAX), reg(EAX)});
  jump(ZYDIS_MNEMONIC_JNLE, "default");
  a_.must(ZYDIS_MNEMONIC_RET, {});
  label("default");
  default_action();
}

// The kernel's delivery, done again: mask = interrupted mask | sa_mask | SIGTRAP (unless
// SA_NODEFER); SA_RESETHAND's reset; then handler(sig, info, uc). Our frame keeps the stack
// as the kernel aligned it (rsp + 8 a multiple of 16) at the call.
void Gen::call_program_handler() {
  constexpr auto program = offsetof(TrapHeader, program);
  a_.must(ZYDIS_MNEMONIC_PUSH, {reg(RDI)});
  a_.must(ZYDIS_MNEMONIC_PUSH, {reg(RSI)});
  a_.must(ZYDIS_MNEMONIC_PUSH, {reg(RDX)});
  a_.must(ZYDIS_MNEMONIC_SUB, {reg(RSP), imm(16)});
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(RAX), mem(RDX, kUcSigmask)});
  a_.must(ZYDIS_MNEMONIC_OR, {reg(RAX), header(program + offsetof(KernelSigaction, mask))});
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R11), header(program + offsetof(KernelSigaction, flags))});
  a_.must(ZYDIS_MNEMONIC_BT, {reg(R11), imm(__builtin_ctz(SA_NODEFER))});
  jump(ZYDIS_MNEMONIC_JB, "deferred");
  a_.must(ZYDIS_MNEMONIC_OR, {reg(RAX), imm(1 << (SIGTRAP - 1))});
  label("deferred");
  a_.must(ZYDIS_MNEMONIC_MOV, {mem(RSP, 0), reg(RAX)});
  mov(EDI, SIG_SETMASK);
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(RSI), reg(RSP)});
  a_.must(ZYDIS_MNEMONIC_XOR, {reg(EDX), reg(EDX)});
  mov(R10D, 8);
  syscall(SYS_rt_sigprocmask);
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R11), header(program + offsetof(KernelSigaction, flags))});
  a_.must(ZYDIS_MNEMONIC_BT, {reg(R11), imm(31)});  // SA_RESETHAND: 0x80000000
  jump(ZYDIS_MNEMONIC_JNB, "no_reset");
  mov(EDI, SIGTRAP);
  a_.must(ZYDIS_MNEMONIC_LEA, {reg(RSI), header(offsetof(TrapHeader, dfl))});
  a_.must(ZYDIS_MNEMONIC_XOR, {reg(EDX), reg(EDX)});
  mov(R10D, 8);
  syscall(SYS_rt_sigaction);
  label("no_reset");
  a_.must(ZYDIS_MNEMONIC_ADD, {reg(RSP), imm(16)});
  a_.must(ZYDIS_MNEMONIC_POP, {reg(RDX)});
  a_.must(ZYDIS_MNEMONIC_POP, {reg(RSI)});
  a_.must(ZYDIS_MNEMONIC_POP, {reg(RDI)});
  a_.must(ZYDIS_MNEMONIC_SUB, {reg(RSP), imm(8)});
  a_.must(ZYDIS_MNEMONIC_CALL, {header(program + offsetof(KernelSigaction, handler))});
  a_.must(ZYDIS_MNEMONIC_ADD, {reg(RSP), imm(8)});
  a_.must(ZYDIS_MNEMONIC_RET, {});
}

// SIG_DFL: reset, and the same siginfo again to this thread; blocked until rt_sigreturn puts
// the interrupted mask back, it then terminates the process as SIGTRAP's default does.
void Gen::default_action() {
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R8), reg(RSI)});
  mov(EDI, SIGTRAP);
  a_.must(ZYDIS_MNEMONIC_LEA, {reg(RSI), header(offsetof(TrapHeader, dfl))});
  a_.must(ZYDIS_MNEMONIC_XOR, {reg(EDX), reg(EDX)});
  mov(R10D, 8);
  syscall(SYS_rt_sigaction);
  syscall(SYS_getpid);
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R9D), reg(EAX)});
  syscall(SYS_gettid);
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(ESI), reg(EAX)});
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(EDI), reg(R9D)});
  mov(EDX, SIGTRAP);
  a_.must(ZYDIS_MNEMONIC_MOV, {reg(R10), reg(R8)});
  syscall(SYS_rt_tgsigqueueinfo);
  a_.must(ZYDIS_MNEMONIC_RET, {});
}

}  // namespace

HandlerCode handler_code(RuntimeAddr area, const Layout& layout) {
  std::map<std::string, RuntimeAddr> none;
  Gen first(area, layout, none);
  HandlerCode draft = first.run();
  Gen second(area, layout, first.labels());
  HandlerCode code = second.run();
  if (code.bytes.size() != draft.bytes.size() || second.labels() != first.labels())
    throw Error("trap handler: the two passes disagree");
  if (code.bytes.size() > layout.code_size) throw Error("trap handler: larger than its page");
  return code;
}

KernelSigaction our_disposition(const KernelSigaction& program, RuntimeAddr handler,
                                RuntimeAddr restorer) {
  KernelSigaction k{};
  k.handler = handler.value();
  k.flags = SA_SIGINFO | kSaRestorer | (program.flags & (SA_ONSTACK | SA_RESTART));
  k.restorer = restorer.value();
  k.mask = ~std::uint64_t{0};
  return k;
}

std::vector<std::uint8_t> resume_copy(const Instruction& in, RuntimeAddr at, std::string& why) {
  if (in.kind != Instruction::Kind::CallRel) return relocate(in, at, why);
  // call rel32: the return address pushed (no register or flag touched), then the callee.
  Assembler a(at);
  std::uint64_t next = in.next().value();
  a.must(ZYDIS_MNEMONIC_LEA, {reg(RSP), mem(RSP, -8)});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RSP, 0, 4), imm(static_cast<std::int32_t>(next))});
  a.must(ZYDIS_MNEMONIC_MOV, {mem(RSP, 4, 4), imm(static_cast<std::int32_t>(next >> 32))});
  a.jump(in.target);
  return a.bytes();
}

std::array<std::uint64_t, 3> moved_addresses(const Instruction& in, RuntimeAddr tracer_copy) {
  return {tracer_copy.value(), in.next().value(),
          in.relative_branch ? in.target.value() : std::uint64_t{0}};
}

}  // namespace probecost::trap
