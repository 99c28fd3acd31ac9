#pragma once
// The inferior as our untraced child, started with --stop-before-loop: it stops itself
// (SIGSTOP) once its threads are ready, so that we can look at it or attach perf events before
// any loop runs. Killed and reaped on every way out but a normal end.
#include <sys/types.h>

namespace probecost {

class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  pid_t pid() const { return pid_; }

  // Waits for its SIGSTOP at the start line; Error if it ended instead.
  void wait_for_stop();
  // SIGCONT, then waits for its exit, which must be a clean one.
  void resume_to_end();

 private:
  int wait(int flags);
  pid_t pid_;
};

}  // namespace probecost
