#include "record/chrome.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/format.hpp"
#include "record/markers.hpp"

namespace probecost::record {

namespace {

constexpr std::int64_t kExactInDouble = std::int64_t{1} << 53;

// A JSON string; bytes that are not UTF-8 (a comm can hold any) become U+FFFD.
std::string json_string(const std::string& s) {
  return json_text(nlohmann::json(s));
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

const char* unmatched_reason(Unmatched why) {
  switch (why) {
    case Unmatched::skipped:
      return "an outer frame returned first (unwound past)";
    case Unmatched::evicted:
      return "stack too deep (returns lost)";
    case Unmatched::thread_gone:
      return "its thread exited";
    case Unmatched::open_at_end:
      return "still running when the recording ended";
  }
  return "unknown";
}

// µs with ns decimals, appended without a formatted-output call (millions of events).
void append_us(std::string& out, std::int64_t ns) {
  if (ns < 0) out += '-';
  std::uint64_t abs = ns < 0 ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, abs / 1000);
  out.append(buf, res.ptr);
  unsigned frac = static_cast<unsigned>(abs % 1000);
  char decimals[4] = {'.', static_cast<char>('0' + frac / 100),
                      static_cast<char>('0' + frac / 10 % 10), static_cast<char>('0' + frac % 10)};
  out.append(decimals, 4);
}

// From 4 GiB to the top of user space: where a PIE's code and data, the heap's mmap'd chunks,
// the libraries and the stacks are. A pointer, almost surely (a count that large is rare).
constexpr std::uint64_t kPointerLow = std::uint64_t{1} << 32, kUserTop = std::uint64_t{1} << 47;

void append_value(std::string& out, std::uint64_t v) {
  auto s = static_cast<std::int64_t>(v);
  bool pointer = v >= kPointerLow && v < kUserTop;
  if (!pointer && s >= -kExactInDouble && s <= kExactInDouble) return append_int(out, s);
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof buf, v, 16);
  out += "\"0x";
  out.append(buf, res.ptr);
  out += '"';
}

int create_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw Error::from_errno("cannot create " + path);
  return fd;
}

}  // namespace

std::string chrome_us(std::int64_t ns) {
  std::string out;
  append_us(out, ns);
  return out;
}

std::string chrome_value(std::uint64_t v) {
  std::string out;
  append_value(out, v);
  return out;
}

ChromeWriter::ChromeWriter(const std::string& path, const RunInfo& run)
    : ChromeWriter(create_file(path), path, run) {
  own_fd_ = true;
}

ChromeWriter::ChromeWriter(int fd, const std::string& name, const RunInfo& run)
    : path_(name), fd_(fd), run_(run), clock_(run.clock) {
  for (const ProbeInfo& p : run_.probes) {
    names_.push_back(json_string(p.function.empty() ? p.spec : p.function));
    call_names_.push_back(json_string(marker_pair(p)));
    name_arg_.push_back(marker_name_arg(p));
  }
  out_ = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  out_.reserve(kBufferBytes + 4096);
}

ChromeWriter::~ChromeWriter() {
  try {
    close_file();
  } catch (...) {
    // A destructor cannot report it; finish() does.
  }
  if (own_fd_) ::close(fd_);
}

void ChromeWriter::flush() {
  for (std::size_t done = 0; done < out_.size();) {
    ssize_t n = ::write(fd_, out_.data() + done, out_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      out_.clear();
      closed_ = true;  // nothing more goes in a file with a hole
      throw Error::from_errno("cannot write " + path_, n < 0 ? errno : EIO);
    }
    done += static_cast<std::size_t>(n);
  }
  out_.clear();
}

void ChromeWriter::put(const std::string& text) {
  out_ += text;
  if (out_.size() >= kBufferBytes) flush();
}

void ChromeWriter::start_line() {
  line_.clear();  // GCC 12's -Wrestrict takes line_ = "{" for an overlapping copy
  line_ += '{';
  line_tsc_.reset();
}

// One event a line, comma-separated.
void ChromeWriter::write_line(const std::string& line) {
  put(events_++ ? ",\n" : "\n");
  put(line);
}

// The held lines no open call can precede now (all: at the end), oldest first; past kMaxHeld,
// the oldest whatever is open.
void ChromeWriter::release(bool all) {
  while (!held_.empty()) {
    bool free = all || open_.empty() || held_.top().tsc <= *open_.begin();
    if (!free && held_.size() <= kMaxHeld) return;
    if (!free) ts_ordered_ = false;
    write_line(held_.top().line);
    held_.pop();
  }
}

// A call's entry is seen first (it is open until its line is made).
void ChromeWriter::event(const Event& e) {
  bool starts =
      e.kind == EventKind::entry || (e.kind == EventKind::marker && e.probe < run_.probes.size() &&
                                     run_.probes[e.probe].marker == MarkerRole::entry);
  if (starts) open_.insert(e.tsc);
}

void ChromeWriter::close_call(const Event& entry) {
  if (auto it = open_.find(entry.tsc); it != open_.end()) open_.erase(it);
}

// {"ph":ph,"name":..,"pid":..,"tid":..,"ts":e's time (a marker's: "cat":"usdt" too)
void ChromeWriter::open_event(const char* ph, const Event& e, const std::string* name) {
  start_line();
  line_ += "\"ph\":\"";
  line_ += ph;
  line_ += "\",\"name\":";
  line_ += name ? *name : names_.at(e.probe);
  if (e.kind == EventKind::marker) line_ += ",\"cat\":\"usdt\"";
  line_ += ",\"pid\":";
  append_int(line_, e.pid);
  line_ += ",\"tid\":";
  append_int(line_, e.tid);
  line_ += ",\"ts\":";
  append_us(line_, clock_.monotonic_ns(e.tsc));
  line_tsc_ = e.tsc;
}

// ,"sf":N for an entry with a stack (its leaf in stackFrames), then
// "args":{"arg0":..,"argN-1":.., "stack":why when it has none, then `extra` (already JSON
// members, or empty)
void ChromeWriter::put_args(const Event& entry, const char* extra) {
  if (entry.stack && entry.stack < leaf_.size() && leaf_[entry.stack]) {
    line_ += ",\"sf\":";
    append_int(line_, leaf_[entry.stack]);
  }
  line_ += ",\"args\":{";
  bool first = true;
  auto member = [&] {
    if (!first) line_ += ',';
    first = false;
  };
  for (int i = 0; i < run_.arg_count; ++i) {
    member();
    line_ += "\"arg";
    append_int(line_, i);
    line_ += "\":";
    append_value(line_, entry.args[static_cast<std::size_t>(i)]);
  }
  if (entry.no_stack != StackMissing::none) {
    member();
    line_ += "\"stack\":" + json_string(stack_missing_text(entry.no_stack));
  }
  if (*extra) member();
  line_ += extra;
}

// Each frame a node of one tree (Chrome's stackFrames): a node per distinct path from the
// outermost frame, named by its frame, so that stacks sharing their callers share nodes.
void ChromeWriter::stack(std::uint32_t id, const std::vector<std::string>& frames) {
  std::uint32_t parent = 0;
  for (const std::string& f : frames) {
    auto [it, added] = nodes_.try_emplace({parent, f}, 0);
    if (added) {
      it->second = static_cast<std::uint32_t>(frames_.size() + 1);
      frames_.push_back({parent, f});
    }
    parent = it->second;
  }
  if (leaf_.size() <= id) leaf_.resize(id + 1, 0);
  leaf_[id] = parent;
}

void ChromeWriter::close_event() {
  line_ += "}}";
  bool free = !line_tsc_ || (held_.empty() && (open_.empty() || *line_tsc_ <= *open_.begin()));
  if (free) return write_line(line_);
  held_.push({*line_tsc_, held_seq_++, std::move(line_)});
  release(false);
}

const std::string& ChromeWriter::call_name(const Event& entry) const {
  int i = name_arg_.at(entry.probe);
  if (i < 0 || !(entry.text & (1u << i))) return call_names_.at(entry.probe);
  std::uint64_t id = entry.args[static_cast<std::size_t>(i)];
  return id < strings_.size() ? strings_[id] : call_names_.at(entry.probe);
}

// "args":{NAME:VALUE,... (the marker's arguments but `skip`), then `extra`
void ChromeWriter::put_marker_args(const Event& e, int skip, const char* extra) {
  line_ += ",\"args\":{";
  bool first = true;
  const auto& args = run_.probes.at(e.probe).marker_args;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (static_cast<int>(i) == skip) continue;
    if (!first) line_ += ',';
    first = false;
    line_ += json_string(args[i].name) + ":";
    bool text = e.text & (1u << i) && e.args[i] < strings_.size();
    if (text)
      line_ += strings_[e.args[i]];
    else
      append_value(line_, e.args[i]);
  }
  if (*extra && !first) line_ += ',';
  line_ += extra;
}

void ChromeWriter::instant(const Event& e) {
  open_event("i", e);
  line_ += ",\"s\":\"t\"";
  put_marker_args(e, -1, "");
  close_event();
}

void ChromeWriter::string(std::uint32_t id, const std::string& text) {
  if (strings_.size() <= id) strings_.resize(id + 1);
  strings_[id] = json_string(text);
}

void ChromeWriter::call(const Event& entry, const Event& end) {
  close_call(entry);
  bool marker = entry.kind == EventKind::marker;
  open_event("X", entry, marker ? &call_name(entry) : nullptr);
  std::int64_t dur = clock_.monotonic_ns(end.tsc) - clock_.monotonic_ns(entry.tsc);
  line_ += ",\"dur\":";
  append_us(line_, dur < 0 ? 0 : dur);
  if (marker) {
    put_marker_args(entry, name_arg_.at(entry.probe), "");
  } else if (end.kind == EventKind::unwound) {
    put_args(entry, "\"unwound\":true");
  } else {
    put_args(entry, "\"ret\":");
    append_value(line_, end.ret);
  }
  close_event();
}

void ChromeWriter::unmatched(const Event& entry, Unmatched why) {
  close_call(entry);
  bool marker = entry.kind == EventKind::marker;
  open_event("B", entry, marker ? &call_name(entry) : nullptr);
  if (marker)
    put_marker_args(entry, name_arg_.at(entry.probe), "\"unmatched\":");
  else
    put_args(entry, "\"unmatched\":");
  line_ += json_string(unmatched_reason(why));
  close_event();
}

void ChromeWriter::orphan(const Event& end) {
  if (end.kind == EventKind::marker) {
    open_event("i", end);
    line_ += ",\"s\":\"t\"";
    put_marker_args(end, -1, "\"entry\":\"none (no entry marker open on the thread)\"");
    close_event();
    return;
  }
  open_event("i", end);
  line_ += ",\"s\":\"t\",\"args\":{";
  if (end.kind == EventKind::exit) {
    line_ += "\"ret\":";
    append_value(line_, end.ret);
    line_ += ',';
  }
  line_ += "\"entry\":\"not recorded (before the recording, or lost)\"";
  close_event();
}

void ChromeWriter::thread_name(std::int32_t pid, std::int32_t tid, const std::string& name,
                               std::uint64_t) {
  start_line();
  line_ += "\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":";
  append_int(line_, pid);
  line_ += ",\"tid\":";
  append_int(line_, tid);
  line_ += ",\"args\":{\"name\":" + json_string(name);
  close_event();
}

void ChromeWriter::process_name(std::int32_t pid, const std::string& name) {
  start_line();
  line_ += "\"ph\":\"M\",\"name\":\"process_name\",\"pid\":";
  append_int(line_, pid);
  line_ += ",\"args\":{\"name\":" + json_string(name);
  close_event();
}

void ChromeWriter::lost(const Lost& l) {
  lost_ += l.count;
}

void ChromeWriter::close_file() {
  if (closed_) return;
  release(true);
  closed_ = true;
  nlohmann::json other = {{"recorder", "probecost record"},
                          {"clock", "CLOCK_MONOTONIC (TSC converted)"},
                          {"tsc_hz", run_.clock.hz},
                          {"records_lost", lost_},
                          {"ts_ordered", ts_ordered_}};
  out_ += "\n]";
  if (!frames_.empty()) {
    out_ += ",\"stackFrames\":{";
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      out_ += (i ? ",\n\"" : "\n\"") + std::to_string(i + 1) +
              "\":{\"name\":" + json_string(frames_[i].second) + ",\"category\":\"probecost\"";
      if (frames_[i].first) out_ += ",\"parent\":\"" + std::to_string(frames_[i].first) + "\"";
      out_ += '}';
      if (out_.size() >= kBufferBytes) flush();
    }
    out_ += "\n}";
  }
  out_ += ",\"otherData\":" + json_text(other) + "}\n";
  flush();
}

void ChromeWriter::finish() {
  close_file();
}

}  // namespace probecost::record
