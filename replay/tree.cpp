// `probecost replay PATH`: each thread's calls, nested, in uftrace replay's layout:
//
//   # DURATION     TID     FUNCTION
//               [  4242] | middle(long) (3) {
//      0.051 us [  4242] |   thrower(long) (3) = 3;
//      0.312 us [  4242] | } = 4; /* middle(long) */
#include <cinttypes>
#include <cstdio>
#include <ostream>

#include "replay/replay.hpp"

namespace probecost::replay {

std::string duration_text(std::int64_t ns) {
  char buf[32];
  double v = static_cast<double>(ns);
  if (ns < 1'000'000)
    std::snprintf(buf, sizeof buf, "%.3f us", v / 1e3);
  else if (ns < 1'000'000'000)
    std::snprintf(buf, sizeof buf, "%.3f ms", v / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3f  s", v / 1e9);
  return buf;
}

// uftrace's "auto" argument format: small magnitudes in decimal, the rest in hex.
std::string value_text(std::uint64_t v) {
  auto s = static_cast<std::int64_t>(v);
  char buf[32];
  if (s > -100000 && s < 100000)
    std::snprintf(buf, sizeof buf, "%" PRId64, s);
  else
    std::snprintf(buf, sizeof buf, "%#" PRIx64, v);
  return buf;
}

bool Filter::named(const std::string& name) const {
  if (functions.empty()) return true;
  for (const auto& f : functions) {
    if (name == f ||
        (name.size() > f.size() && name.compare(0, f.size(), f) == 0 && name[f.size()] == '('))
      return true;
  }
  return false;
}

namespace {

// Strings joined by appending (GCC 12 warns, wrongly, on "literal" + std::string&&).
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  (s += ... += parts);
  return s;
}

class TreePrinter {
 public:
  TreePrinter(std::ostream& out, const Collected& rec, const Thread& t, const Filter& f)
      : out_(out), rec_(rec), t_(t), f_(f) {}

  void open(const Stored& c, int depth, bool holds) {
    if (static_cast<int>(roots_.size()) <= depth)
      roots_.resize(static_cast<std::size_t>(depth) + 1);
    // The depth of the call the filter matched that this one is under, or -1.
    int root = depth > 0 ? roots_[static_cast<std::size_t>(depth) - 1] : -1;
    if (root < 0 && f_.named(name(c))) root = depth;
    roots_[static_cast<std::size_t>(depth)] = root;
    if (!shown(c, depth)) return;
    int level = depth - root;
    // It holds a shown call when the next call is one level down and shown too.
    bool block = holds && level + 1 < f_.max_depth && next_shown(c);
    if (block) {
      line("", level, cat(label(c), " {"));
    } else {
      line(dur(c), level, cat(label(c), result(c), ";", tail(c)));
    }
    blocks_.resize(static_cast<std::size_t>(depth) + 1);
    blocks_[static_cast<std::size_t>(depth)] = block;
  }
  void close(const Stored& c, int depth, std::int64_t) {
    if (!shown(c, depth) || !blocks_[static_cast<std::size_t>(depth)]) return;
    int level = depth - roots_[static_cast<std::size_t>(depth)];
    line(dur(c), level, cat("}", result(c), "; /* ", name(c), " */"));
  }

 private:
  const std::string& name(const Stored& c) const { return rec_.functions().at(c.function); }
  bool shown(const Stored& c, int depth) const {
    int root = roots_[static_cast<std::size_t>(depth)];
    return root >= 0 && depth - root < f_.max_depth && f_.in_range(rec_, c);
  }
  // The call after c in tree order (c holds it).
  bool next_shown(const Stored& c) const {
    const Stored& next = *(&c + 1);
    return f_.in_range(rec_, next);
  }
  std::string label(const Stored& c) const {
    const std::string& n = name(c);
    if (c.end == End::orphan) return "}";
    std::string args;
    for (int i = 0; i < rec_.arg_count(); ++i) {
      if (i) args += ", ";
      args += value_text(t_.args[static_cast<std::size_t>(c.seq) * rec_.arg_count() + i]);
    }
    bool signature = !n.empty() && n.back() == ')';
    if (signature) return args.empty() ? n : cat(n, " (", args, ")");
    return cat(n, "(", args, ")");
  }
  std::string result(const Stored& c) const {
    switch (c.end) {
      case End::returned:
      case End::orphan:
        return cat(" = ", value_text(c.ret));
      case End::unwound:
        return " (unwound)";
      case End::unmatched:
        return cat(" (no return: ", rec_.reason(c.why), ")");
    }
    return "";
  }
  std::string tail(const Stored& c) const {
    if (c.end == End::orphan) return cat(" /* ", name(c), ": its entry is not in the recording */");
    return "";
  }
  std::string dur(const Stored& c) const {
    if (c.end == End::unmatched || c.end == End::orphan) return "-";
    return duration_text(c.end_ns - c.start_ns);
  }
  void line(const std::string& duration, int level, const std::string& text) {
    char head[48];
    std::snprintf(head, sizeof head, "%12s [%6d] | ", duration.c_str(), t_.tid);
    out_ << head << std::string(static_cast<std::size_t>(level) * 2, ' ') << text << '\n';
  }

  std::ostream& out_;
  const Collected& rec_;
  const Thread& t_;
  const Filter& f_;
  std::vector<int> roots_;
  std::vector<bool> blocks_;
};

std::string thread_title(const Collected& rec, const Thread& t) {
  std::string title = cat("# thread ", std::to_string(t.tid));
  if (!t.name.empty()) title += cat(" (", t.name, ")");
  title += cat(" of process ", std::to_string(t.pid));
  const std::string& process = rec.process_name(t.pid);
  if (!process.empty()) title += cat(" (", process, ")");
  title += cat(": ", std::to_string(t.calls.size()), " calls");
  if (t.lost) title += cat(", ", std::to_string(t.lost), " records lost");
  return title;
}

}  // namespace

void print_tree(std::ostream& out, const Collected& rec, const Filter& filter) {
  out << "#     DURATION      TID     FUNCTION\n";
  for (const auto& [key, t] : rec.threads()) {
    if (!filter.thread(t.tid) || t.calls.empty()) continue;
    out << thread_title(rec, t) << "\n";
    TreePrinter printer(out, rec, t, filter);
    walk(t, printer);
  }
  if (rec.lost_total())
    out << "# " << rec.lost_total() << " records lost by the tracer: calls are missing above\n";
}

}  // namespace probecost::replay
