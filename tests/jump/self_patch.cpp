#include "self_patch.hpp"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "common/error.hpp"
#include "tracer/symbols/symbols.hpp"

namespace probecost::selftest {

SelfMemory::SelfMemory() : fd_(::open("/proc/self/mem", O_RDWR | O_CLOEXEC)) {
  if (fd_ < 0) throw Error::from_errno("open /proc/self/mem");
}

SelfMemory& SelfMemory::instance() {
  static SelfMemory memory;
  return memory;
}

SelfMemory::~SelfMemory() {
  ::close(fd_);
}

void SelfMemory::read(RuntimeAddr at, std::span<std::uint8_t> out) {
  if (::pread(fd_, out.data(), out.size(), static_cast<off_t>(at.value())) !=
      static_cast<ssize_t>(out.size()))
    throw Error::from_errno("read of /proc/self/mem at " + at.hex());
}

void SelfMemory::write(RuntimeAddr at, std::span<const std::uint8_t> bytes) {
  if (::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(at.value())) !=
      static_cast<ssize_t>(bytes.size()))
    throw Error::from_errno("write of /proc/self/mem at " + at.hex());
}

namespace {

// Maps `size` bytes of `fd` at a free place within 1 GiB of `near`, trying candidates below and
// above it. MAP_FIXED_NOREPLACE never clobbers a mapping that is there.
void* map_near(RuntimeAddr near, std::size_t size, int fd) {
  constexpr std::uint64_t kStep = 16ull << 20;
  for (std::uint64_t k = 1; k < 64; ++k) {
    for (int sign : {-1, 1}) {
      std::uint64_t hint =
          (near.value() & ~(kStep - 1)) + sign * static_cast<std::int64_t>(k * kStep);
      void* p = ::mmap(reinterpret_cast<void*>(hint), size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
      if (p != MAP_FAILED) return p;
    }
  }
  throw Error("no free range near " + near.hex() + " for the jump area");
}

}  // namespace

LocalArea::LocalArea(RuntimeAddr near, const jump::AreaConfig& config) {
  auto layout = jump::AreaLayout::of(config);
  size_ = layout.size;
  int fd = static_cast<int>(::syscall(SYS_memfd_create, jump::kAreaName, MFD_CLOEXEC));
  if (fd < 0) throw Error::from_errno("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(size_)) != 0) throw Error::from_errno("ftruncate");
  void* view = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* tracee = map_near(near, size_, fd);
  ::close(fd);
  if (view == MAP_FAILED) throw Error::from_errno("mmap of the tracer's view");
  view_ = static_cast<std::uint8_t*>(view);
  tracee_ = RuntimeAddr(reinterpret_cast<std::uintptr_t>(tracee));
  if (::mprotect(static_cast<std::uint8_t*>(tracee) + layout.code_offset, layout.code_size,
                 PROT_READ | PROT_EXEC) != 0)
    throw Error::from_errno("mprotect of the trampolines");
  writer_ = std::make_unique<jump::AreaWriter>(std::span(view_, size_), tracee_, layout, getpid());
}

LocalArea::~LocalArea() {
  // The tracee's view stays mapped, as the lead's will: a thread may still be in a trampoline.
  ::munmap(view_, size_);
}

LocalCallBuffer::LocalCallBuffer(const jump::CallBufferConfig& config)
    : layout_(jump::CallBufferLayout::of(config)) {
  void* p =
      ::mmap(nullptr, layout_.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw Error::from_errno("mmap of a call buffer");
  view_ = static_cast<std::uint8_t*>(p);
  jump::format_call_buffer(view(), reinterpret_cast<std::uintptr_t>(p), layout_);
}

LocalCallBuffer::~LocalCallBuffer() {
  ::munmap(view_, layout_.size);
}

CallRecordTarget LocalCallBuffer::target(std::uint32_t id) const {
  CallRecordTarget t;
  t.control = RuntimeAddr(reinterpret_cast<std::uintptr_t>(view_) + layout_.ctl_offset);
  t.layout = layout_;
  t.id = id;
  t.rseq_offset = static_cast<std::int32_t>(__rseq_offset);
  t.threads = RuntimeAddr(reinterpret_cast<std::uintptr_t>(view_) + layout_.threads_offset);
  return t;
}

bool have_rseq() {
  return __rseq_size >= 20;
}

void CallPatch::install() {
  for (auto& s : sites) s->install();
}

void CallPatch::remove() {
  for (auto& s : sites) s->remove();
}

std::unique_ptr<CallPatch> patch_calls(const std::string& function, std::uint32_t id,
                                       LocalArea& area, const LocalCallBuffer& buffer) {
  Function f = function_named(function);
  auto patch = std::make_unique<CallPatch>();
  patch->plans = plan_calls(f.start, f.code);
  const CallPlans& p = patch->plans;
  if (!p.entry || !p.int3_exits.empty())
    throw Error(function + " needs an int3: " +
                (p.entry ? p.int3_exits.front().why_not_jump : p.why_no_entry));
  std::vector<JumpPlan> all = p.exits;
  all.insert(all.begin(), *p.entry);
  jump::SiteOptions options;
  options.id = id;
  options.calls = buffer.target(id);
  for (const auto& plan : all) {
    std::string why;
    auto placed = area.writer().add_site(plan, options, why);
    if (!placed) throw Error("cannot place a call patch of " + function + ": " + why);
    patch->sites.push_back(std::make_unique<PatchSite>(SelfMemory::instance(), placed->patch));
  }
  return patch;
}

Function function_named(const std::string& name) {
  static ProcessSymbols symbols(getpid());
  Symbol s = symbols.resolve(name);
  if (!s.size) throw Error("symbol " + name + " has no size");
  Function f{s.address, std::vector<std::uint8_t>(s.size)};
  std::memcpy(f.code.data(), reinterpret_cast<const void*>(s.address.value()), s.size);
  return f;
}

RuntimeAddr address_of(const std::string& name) {
  static ProcessSymbols symbols(getpid());
  return symbols.resolve(name).address;
}

namespace {

// What the signal handlers read: set by the patching thread before it signals or patches.
struct Watched {
  std::atomic<std::uint64_t> site{0}, length{0}, trampoline{0};
  std::array<std::atomic<std::uint64_t>, 2 * kMaxPatchLength> copies{};  // original, copy pairs
  std::atomic<std::uint64_t> traps{0}, moved{0};
  sem_t ack;
} g_watched;

greg_t& rip_of(void* context) {
  return static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP];
}

void on_trap(int, siginfo_t*, void* context) {
  greg_t& rip = rip_of(context);
  if (static_cast<std::uint64_t>(rip) - 1 != g_watched.site.load()) abort();  // not our int3
  rip = static_cast<greg_t>(g_watched.trampoline.load());
  g_watched.traps.fetch_add(1, std::memory_order_relaxed);
}

void on_evacuate(int, siginfo_t*, void* context) {
  greg_t& rip = rip_of(context);
  auto pc = static_cast<std::uint64_t>(rip);
  std::uint64_t site = g_watched.site.load(), length = g_watched.length.load();
  if (pc > site && pc < site + length) {
    for (std::size_t i = 0; i < g_watched.copies.size(); i += 2) {
      if (g_watched.copies[i].load() == pc) {
        rip = static_cast<greg_t>(g_watched.copies[i + 1].load());
        g_watched.moved.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
  }
  sem_post(&g_watched.ack);
}

void handle(int sig, void (*fn)(int, siginfo_t*, void*)) {
  struct sigaction sa {};
  sa.sa_sigaction = fn;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(sig, &sa, nullptr) != 0) throw Error::from_errno("sigaction");
}

}  // namespace

ThreadSync::ThreadSync() {
  sem_init(&g_watched.ack, 0, 0);
  handle(SIGTRAP, on_trap);
  handle(SIGUSR1, on_evacuate);
  membarrier_ =
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) == 0;
}

ThreadSync::~ThreadSync() {
  ::signal(SIGTRAP, SIG_DFL);
  ::signal(SIGUSR1, SIG_DFL);
  sem_destroy(&g_watched.ack);
}

void ThreadSync::watch(const PatchSite& site, const Trampoline& trampoline) {
  g_watched.site = site.address().value();
  g_watched.length = site.patch().length;
  g_watched.trampoline = trampoline.address.value();
  for (auto& c : g_watched.copies) c = 0;
  for (std::size_t i = 0; i < trampoline.copies.size(); ++i) {
    g_watched.copies[2 * i] = trampoline.copies[i].first.value();
    g_watched.copies[2 * i + 1] = trampoline.copies[i].second.value();
  }
}

void ThreadSync::signal_workers() {
  for (pthread_t t : workers_) pthread_kill(t, SIGUSR1);
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    while (sem_wait(&g_watched.ack) != 0) {
    }
  }
}

void ThreadSync::serialize() {
  // Without membarrier, a signal does it: its delivery and return go through the kernel.
  if (!membarrier_ ||
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0) != 0)
    signal_workers();
}

void ThreadSync::evacuate(RuntimeAddr, std::size_t) {
  signal_workers();
}

std::uint64_t ThreadSync::traps() {
  return g_watched.traps.load();
}

std::uint64_t ThreadSync::moved() {
  return g_watched.moved.load();
}

}  // namespace probecost::selftest
