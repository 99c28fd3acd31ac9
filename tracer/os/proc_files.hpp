#pragma once
// Small readers of /proc files shared by the tracer's sources.
#include <sys/types.h>

#include <string>
#include <vector>

namespace probecost {

// The whole text of /proc/PID/`file` (status, stat, ...), read with plain read(2) (an ifstream
// costs as much again as the kernel's work for a file this small); empty if it is gone.
std::string proc_text(pid_t pid, const char* file);
// The number after `key` ("Tgid:") at the start of a line of a /proc status text; -1 if none.
long status_number(const std::string& status, const char* key);
// Field `n` (1-based, as in proc(5)) of /proc/PID/stat; empty if the process is gone.
std::string stat_field(pid_t pid, int n);
// The CPU time a process has used so far, user + system, in seconds, to the nanosecond (its
// CPU clock, clock_getcpuclockid(3); /proc/PID/stat counts in clock ticks, 10 ms, too coarse
// for a short run); -1 once it is reaped.
double process_cpu_seconds(pid_t pid);
// Our children's CPU time so far (RUSAGE_CHILDREN), user + system, in seconds.
double children_cpu_seconds();
// The thread group (process) a task belongs to, from /proc/TID/status; 0 if it is gone.
pid_t tgid_of(pid_t tid);
// The threads of a process (/proc/PID/task); empty if it is gone.
std::vector<pid_t> task_ids(pid_t pid);

}  // namespace probecost
