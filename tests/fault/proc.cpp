#include "proc.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

namespace fault {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void pause_for(double seconds) {
  if (seconds <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

namespace {

int poll_ms(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count()) + 1;
}

}  // namespace

Pipe::Pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) throw std::runtime_error("pipe2 failed");
  read = fds[0];
  write = fds[1];
}
Pipe::~Pipe() {
  close_read();
  close_write();
}
void Pipe::close_read() {
  if (read >= 0) ::close(read);
  read = -1;
}
void Pipe::close_write() {
  if (write >= 0) ::close(write);
  write = -1;
}

std::optional<std::string> LineReader::next(Deadline deadline) {
  for (;;) {
    auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (eof_) return std::nullopt;
    pollfd p = {fd_, POLLIN, 0};
    int r = ::poll(&p, 1, poll_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;  // deadline
    char chunk[4096];
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof_ = true;
      if (!buf_.empty()) {
        std::string line = buf_;
        buf_.clear();
        return line;
      }
      return std::nullopt;
    }
    buf_.append(chunk, static_cast<std::size_t>(n));
    seen_.append(chunk, static_cast<std::size_t>(n));
  }
}

Child::Child(const std::vector<std::string>& argv, const SpawnFds& fds) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int null = ::open("/dev/null", O_RDWR);
    // ctl first: its fd number may be 0..2 of ours.
    int ctl = fds.ctl >= 0 ? ::fcntl(fds.ctl, F_DUPFD, 10) : -1;
    ::dup2(fds.in >= 0 ? fds.in : null, 0);
    ::dup2(fds.out >= 0 ? fds.out : null, 1);
    ::dup2(fds.err >= 0 ? fds.err : null, 2);
    if (ctl >= 0) ::dup2(ctl, 3);  // dup2 clears close-on-exec
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (fds.stop_before_exec) ::raise(SIGSTOP);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
}

Child::~Child() {
  if (running()) kill();
  release();
}

Child::Child(Child&& o) noexcept : pid_(o.pid_), pidfd_(o.pidfd_), status_(o.status_) {
  o.pid_ = -1;
  o.pidfd_ = -1;
}

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    if (running()) kill();
    release();
    pid_ = o.pid_;
    pidfd_ = o.pidfd_;
    status_ = o.status_;
    o.pid_ = -1;
    o.pidfd_ = -1;
  }
  return *this;
}

void Child::release() {
  if (pidfd_ >= 0) ::close(pidfd_);
  pidfd_ = -1;
}

std::optional<int> Child::wait(Deadline deadline) {
  if (status_ || pid_ <= 0) return status_;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = status;
      return status_;
    }
    if (r < 0 && errno != EINTR) {
      status_ = 0x7f00;  // not ours any more (should not happen): treat as gone
      return status_;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    if (pidfd_ >= 0) {
      pollfd p = {pidfd_, POLLIN, 0};
      ::poll(&p, 1, poll_ms(deadline));
    } else {
      pause_for(0.001);
    }
  }
}

void Child::signal(int sig) const {
  if (pid_ <= 0 || status_) return;
  // Through the pidfd: once reaped (reap_orphans), the PID may already name another process.
  if (pidfd_ >= 0) {
    ::syscall(SYS_pidfd_send_signal, pidfd_, sig, nullptr, 0);
  } else {
    ::kill(pid_, sig);
  }
}

int Child::kill() {
  signal(SIGKILL);
  while (!wait(after(60))) {
  }
  return *status_;
}

bool Child::wait_stopped(Deadline deadline) {
  return poll_until(
      [&] {
        int status = 0;
        return ::waitpid(pid_, &status, WUNTRACED | WNOHANG) == pid_ && WIFSTOPPED(status);
      },
      deadline);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = sigabbrev_np(WTERMSIG(status));
    return std::string("killed by SIG") + (name ? name : std::to_string(WTERMSIG(status)).c_str());
  }
  return "status " + std::to_string(status);
}

char proc_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

std::string thread_states(pid_t pid) {
  std::string dir = "/proc/" + std::to_string(pid) + "/task", states;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return states;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') states += proc_state(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  ::closedir(d);
  return states;
}

bool all_threads_in_state(pid_t pid, char state) {
  std::string states = thread_states(pid);
  return !states.empty() && states.find_first_not_of(state) == std::string::npos;
}

void become_subreaper() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

void reap_orphans() {
  while (::waitpid(-1, nullptr, WNOHANG | __WALL) > 0) {
  }
}

std::string self_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string p(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  return p.substr(0, p.rfind('/'));
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace fault
