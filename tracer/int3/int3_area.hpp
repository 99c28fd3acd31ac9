#pragma once
// The trap area of one traced process, tracer side (breakpoint/in_tracee/trap_area.hpp): mapped
// when the first int3 probe goes in, it records every int3 before the byte is written (so that
// restore finds it, even after a SIGKILL of probecost), and carries the SIGTRAP handler that stands
// in for probecost should it die (breakpoint/in_tracee/trap_handler.hpp), installed over the
// program's own disposition and put back when the probes come out.
//
// What the handler cannot do, and what stays the guardian's (tracer/int3/guardian.hpp) to do:
// - a process whose seccomp filter refuses an executable mapping, or any system call the
//   handler makes, gets no handler (the records stay, in a read-only page);
// - a thread that blocks SIGTRAP: the kernel's force_sig() of an int3 trap resets a blocked
//   SIGTRAP to SIG_DFL and kills, handler or not. Said in how().
// - a program that installs its own SIGTRAP disposition later replaces ours; it is left as
//   the program set it when we let go.
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "breakpoint/in_tracee/trap_area.hpp"
#include "breakpoint/x86/decoder.hpp"
#include "tracer/os/maps.hpp"

namespace probecost {

class RemoteProcess;

class Int3Area {
 public:
  // Maps the area in `proc` near `near` (so that the handler's copies of instructions near it
  // reach), writes it, and installs the handler, every thread of `proc` stopped. Read-exec
  // with the handler, or read-only with the records alone when the process may not map
  // executable memory or make the handler's calls (how() says why). Nothing when no thread
  // can map anything now, or the process refuses even that.
  static std::unique_ptr<Int3Area> map(RemoteProcess& proc, RuntimeAddr near);
  // The area of `parent` in a fork child `child`, whose memory holds a copy of it, records and
  // handler (installed in the child too: it inherited the disposition).
  static std::unique_ptr<Int3Area> inherit(RemoteProcess& child, const Int3Area& parent);
  ~Int3Area();
  Int3Area(const Int3Area&) = delete;
  Int3Area& operator=(const Int3Area&) = delete;

  // Before the int3 at `site` is written over `original`: its record, with the handler's copy
  // of the instruction there. False when the area has no room (the site goes in unrecorded:
  // said in how()).
  bool record(RuntimeAddr site, std::uint8_t original);
  // The tracer's own copy of the instruction at `site` (its outline step-over), where a
  // thread it moved there may be found with its trap pending if probecost dies; the handler
  // resumes there too when the area is out of the site's reach.
  void tracer_copy(RuntimeAddr site, RuntimeAddr copy);
  // The int3 at `site` is out.
  void removed(RuntimeAddr site);
  // Every int3 is out, every thread stopped: the records say so, and the program's
  // disposition is put back if ours is still the process's. True when nothing of the process
  // leads into the area any more (our handler is not its disposition): it may be unmapped
  // once no thread is in it (OurMappings).
  bool let_go();
  // The address space went away (exec, exit): nothing to write any more.
  void forget() { gone_ = true; }

  RuntimeAddr address() const { return writer_->address(); }
  std::uint64_t size() const { return writer_->layout().size; }
  // How a hit is taken care of if probecost dies, for the report.
  const std::string& how() const { return how_; }
  // What the user should hear, once: why there is no handler, or what it cannot cover (empty
  // when the handler covers everything, and after the first call).
  std::string caveat();

 private:
  Int3Area(RemoteProcess& proc, std::unique_ptr<trap::AreaWriter> writer)
      : proc_(proc), writer_(std::move(writer)) {}
  static std::unique_ptr<Int3Area> map_lent(RemoteProcess& proc, RuntimeAddr near);
  void install_handler();
  void set_handler();
  void note_blocking();  // the threads that block SIGTRAP: what the handler cannot cover
  std::optional<std::string> why_no_handler();
  std::optional<Instruction> decode_at(RuntimeAddr site);

  RemoteProcess& proc_;
  std::unique_ptr<trap::AreaWriter> writer_;
  void undo_forced_reset();
  std::optional<trap::KernelSigaction> disposition_now();
  bool put_back_now();

  bool installed_ = false;
  bool let_go_tried_ = false;          // a let_go() took our handler out, or tried to
  std::uint64_t program_handler_ = 0;  // the program's SIGTRAP handler when ours went in
  std::vector<pid_t> blocking_;        // threads that blocked SIGTRAP then
  bool gone_ = false;
  bool caveat_said_ = false;
  bool caveat_ = false;  // how_ is worth saying
  std::string how_;
};

}  // namespace probecost
