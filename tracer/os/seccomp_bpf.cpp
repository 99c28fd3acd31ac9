// Classic BPF as seccomp runs it: the instructions seccomp_check_filter() lets through, on
// struct seccomp_data, with 16 words of scratch memory. Jumps only go forward, so every program
// ends.
#include <linux/audit.h>
#include <linux/seccomp.h>

#include <cstring>

#include "common/error.hpp"
#include "tracer/os/seccomp.hpp"

namespace probecost::seccomp {

namespace {

class Machine {
 public:
  Machine(const Program& p, const CallData& call) : p_(p), call_(call) {}

  std::uint32_t run() {
    for (std::size_t pc = 0;;) {
      if (pc >= p_.size()) bad("runs past its end", pc);
      const sock_filter& in = p_[pc];
      if (BPF_CLASS(in.code) == BPF_RET) return ret(in, pc);
      pc = step(in, pc) + 1;
      // Division by X == 0 ends the program with 0 (bpf_convert_filter), which is
      // SECCOMP_RET_KILL_THREAD.
      if (divided_by_zero_) return 0;
    }
  }

 private:
  [[noreturn]] void bad(const std::string& what, std::size_t pc) const {
    throw Error("seccomp filter instruction " + std::to_string(pc) + " " + what);
  }

  std::uint32_t ret(const sock_filter& in, std::size_t pc) const {
    if (in.code == (BPF_RET | BPF_K)) return in.k;
    if (in.code == (BPF_RET | BPF_A)) return a_;
    bad("is a return seccomp does not allow", pc);
  }

  // Executes `in`; returns the index of the instruction it leaves off at (a jump's, before
  // the usual +1).
  std::size_t step(const sock_filter& in, std::size_t pc) {
    switch (BPF_CLASS(in.code)) {
      case BPF_LD:
        a_ = load(in, pc);
        return pc;
      case BPF_LDX:
        x_ = loadx(in, pc);
        return pc;
      case BPF_ST:
      case BPF_STX:
        if (in.code != BPF_ST && in.code != BPF_STX) bad("is a store seccomp does not allow", pc);
        mem(in.k, pc) = in.code == BPF_ST ? a_ : x_;
        return pc;
      case BPF_ALU:
        alu(in, pc);
        return pc;
      case BPF_JMP:
        return jump(in, pc);
      case BPF_MISC:
        if (in.code == (BPF_MISC | BPF_TAX))
          x_ = a_;
        else if (in.code == (BPF_MISC | BPF_TXA))
          a_ = x_;
        else
          bad("is a misc operation seccomp does not allow", pc);
        return pc;
    }
    bad("has an unknown class", pc);
  }

  std::uint32_t& mem(std::uint32_t k, std::size_t pc) {
    if (k >= BPF_MEMWORDS) bad("addresses scratch word " + std::to_string(k), pc);
    return m_[k];
  }

  std::uint32_t load(const sock_filter& in, std::size_t pc) {
    switch (in.code) {
      case BPF_LD | BPF_W | BPF_ABS: {
        // The kernel checks: a 32-bit word, aligned, inside seccomp_data.
        if (in.k >= sizeof(CallData) || in.k % 4) bad("loads outside seccomp_data", pc);
        std::uint32_t w;
        std::memcpy(&w, reinterpret_cast<const char*>(&call_) + in.k, 4);
        return w;
      }
      case BPF_LD | BPF_W | BPF_LEN:
        return sizeof(CallData);
      case BPF_LD | BPF_IMM:
        return in.k;
      case BPF_LD | BPF_MEM:
        return mem(in.k, pc);
    }
    bad("is a load seccomp does not allow", pc);
  }

  std::uint32_t loadx(const sock_filter& in, std::size_t pc) {
    switch (in.code) {
      case BPF_LDX | BPF_W | BPF_LEN:
        return sizeof(CallData);
      case BPF_LDX | BPF_IMM:
        return in.k;
      case BPF_LDX | BPF_MEM:
        return mem(in.k, pc);
    }
    bad("is a load seccomp does not allow", pc);
  }

  void alu(const sock_filter& in, std::size_t pc) {
    if (BPF_OP(in.code) == BPF_NEG) {
      a_ = 0u - a_;
      return;
    }
    std::uint32_t v = BPF_SRC(in.code) == BPF_X ? x_ : in.k;
    switch (BPF_OP(in.code)) {
      case BPF_ADD:
        a_ += v;
        return;
      case BPF_SUB:
        a_ -= v;
        return;
      case BPF_MUL:
        a_ *= v;
        return;
      case BPF_AND:
        a_ &= v;
        return;
      case BPF_OR:
        a_ |= v;
        return;
      case BPF_XOR:
        a_ ^= v;
        return;
      case BPF_LSH:
        a_ = v >= 32 ? 0 : a_ << v;
        return;
      case BPF_RSH:
        a_ = v >= 32 ? 0 : a_ >> v;
        return;
      case BPF_DIV:
        if (v == 0) {
          // A constant 0 the kernel refuses at load time.
          if (BPF_SRC(in.code) == BPF_K) bad("divides by the constant 0", pc);
          divided_by_zero_ = true;
          return;
        }
        a_ /= v;
        return;
    }
    bad("is an arithmetic operation seccomp does not allow", pc);
  }

  std::size_t jump(const sock_filter& in, std::size_t pc) {
    std::uint32_t v = BPF_SRC(in.code) == BPF_X ? x_ : in.k;
    std::size_t to;
    switch (BPF_OP(in.code)) {
      case BPF_JA:
        to = pc + in.k;
        break;
      case BPF_JEQ:
        to = pc + (a_ == v ? in.jt : in.jf);
        break;
      case BPF_JGT:
        to = pc + (a_ > v ? in.jt : in.jf);
        break;
      case BPF_JGE:
        to = pc + (a_ >= v ? in.jt : in.jf);
        break;
      case BPF_JSET:
        to = pc + ((a_ & v) ? in.jt : in.jf);
        break;
      default:
        bad("is a jump seccomp does not allow", pc);
    }
    if (to + 1 >= p_.size()) bad("jumps out of the program", pc);
    return to;
  }

  const Program& p_;
  const CallData& call_;
  std::uint32_t a_ = 0, x_ = 0;
  std::uint32_t m_[BPF_MEMWORDS] = {};
  bool divided_by_zero_ = false;
};

}  // namespace

CallData x86_64_call(long nr, std::span<const long> args, std::uint64_t syscall_at) {
  CallData d;
  d.nr = static_cast<std::int32_t>(nr);
  d.arch = AUDIT_ARCH_X86_64;
  d.instruction_pointer = syscall_at + 2;
  for (std::size_t i = 0; i < args.size() && i < 6; ++i)
    d.args[i] = static_cast<std::uint64_t>(args[i]);
  return d;
}

std::uint32_t run(const Program& program, const CallData& call) {
  if (program.empty() || program.size() > BPF_MAXINSNS)
    throw Error("seccomp filter of " + std::to_string(program.size()) + " instructions");
  return Machine(program, call).run();
}

Action action_of(std::uint32_t value) {
  switch (value & SECCOMP_RET_ACTION_FULL) {
    case SECCOMP_RET_KILL_PROCESS:
      return Action::KillProcess;
    case SECCOMP_RET_KILL_THREAD:
      return Action::KillThread;
    case SECCOMP_RET_TRAP:
      return Action::Trap;
    case SECCOMP_RET_ERRNO:
      return Action::Errno;
    case SECCOMP_RET_USER_NOTIF:
      return Action::UserNotif;
    case SECCOMP_RET_TRACE:
      return Action::Trace;
    case SECCOMP_RET_LOG:
      return Action::Log;
    case SECCOMP_RET_ALLOW:
      return Action::Allow;
  }
  return Action::KillProcess;
}

}  // namespace probecost::seccomp
