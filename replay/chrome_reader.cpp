// record's Chrome JSON (record/chrome.hpp) read back through nlohmann's SAX parser: one event
// object at a time, never the whole document. "X" is a call (args.unwound: closed by an
// unwind), "B" one that never returned (args.unmatched says why), "i" a return without its
// entry, "M" a thread's or process's name; otherData.records_lost the records the tracer lost.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/error.hpp"
#include "common/fd.hpp"
#include "replay/recording.hpp"

namespace probecost::replay {

namespace {

// A regular file mapped read-only for the parser: the page cache's pages, read once in order.
class Mapped {
 public:
  explicit Mapped(const std::string& path) : fd_(Fd::open(path, O_RDONLY)) {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) throw Error::from_errno("cannot stat " + path);
    size_ = static_cast<std::size_t>(st.st_size);
    if (!S_ISREG(st.st_mode) || size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_.get(), 0);
    if (p == MAP_FAILED) throw Error::from_errno("cannot map " + path);
    data_ = static_cast<const char*>(p);
    ::madvise(p, size_, MADV_SEQUENTIAL);
  }
  ~Mapped() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  const char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  Fd fd_;
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

// "1234.567" (µs with ns decimals, as record writes ts and dur) as ns, exactly.
std::int64_t us_text_to_ns(const std::string& text) {
  bool negative = !text.empty() && text[0] == '-';
  const char* p = text.c_str() + (negative ? 1 : 0);
  const char* end = text.c_str() + text.size();
  std::int64_t whole = 0;
  auto r = std::from_chars(p, end, whole);
  std::int64_t ns = whole * 1000;
  if (r.ptr < end && *r.ptr == '.') {
    std::int64_t scale = 100;
    for (const char* d = r.ptr + 1; d < end && *d >= '0' && *d <= '9' && scale > 0;
         ++d, scale /= 10)
      ns += (*d - '0') * scale;
  }
  if (r.ptr < end && (*r.ptr == 'e' || *r.ptr == 'E'))
    ns = static_cast<std::int64_t>(std::strtod(text.c_str(), nullptr) * 1000);
  return negative ? -ns : ns;
}

using Json = nlohmann::json;

struct Event {
  std::string ph, name, s, why, arg_name;
  std::int32_t pid = 0, tid = 0;
  std::int64_t ts = 0, dur = -1;
  bool has_ret = false, unwound = false;
  std::uint64_t ret = 0;
  int args = 0;  // how many of argN were given (the highest N + 1)
  std::array<std::uint64_t, kMaxArgs> arg{};
};

class Parser : public nlohmann::json_sax<Json> {
 public:
  explicit Parser(Sink& sink) : sink_(sink) {}

  bool null() override { return true; }
  bool boolean(bool v) override {
    if (depth_ == 4 && args_ && key_ == "unwound") e_.unwound = v;
    return true;
  }
  bool number_integer(number_integer_t v) override {
    return value(static_cast<std::uint64_t>(v), nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override { return value(v, nullptr); }
  bool number_float(number_float_t v, const string_t& text) override {
    return value(static_cast<std::uint64_t>(static_cast<std::int64_t>(v)), &text);
  }
  bool string(string_t& v) override {
    if (depth_ == 3) {
      if (key_ == "ph")
        e_.ph = v;
      else if (key_ == "name")
        e_.name = v;
      else if (key_ == "s")
        e_.s = v;
    } else if (depth_ == 4 && args_) {
      if (key_ == "unmatched")
        e_.why = v;
      else if (key_ == "name")
        e_.arg_name = v;
      else if (v.rfind("0x", 0) == 0)
        value(std::strtoull(v.c_str() + 2, nullptr, 16), nullptr);
    }
    return true;
  }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    if (depth_ == 0) top_ = true;
    if (depth_ == 2 && events_) e_ = Event{};
    if (depth_ == 3 && key_ == "args") args_ = true;
    if (depth_ == 1 && key_ == "otherData") other_ = true;
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool end_object() override {
    --depth_;
    if (depth_ == 3) args_ = false;
    if (depth_ == 2 && events_) dispatch();
    if (depth_ == 1) other_ = false;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 1 && key_ == "traceEvents") events_ = seen_events_ = true;
    ++depth_;
    return true;
  }
  bool end_array() override {
    if (--depth_ == 1) events_ = false;
    return true;
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& ex) override {
    error_at_ = position;
    error_ = ex.what();
    token_ = token;
    return false;
  }

  bool top() const { return top_; }
  bool seen_events() const { return seen_events_; }
  std::uint64_t events() const { return count_; }
  std::size_t error_at() const { return error_at_; }
  const std::string& error() const { return error_; }
  void finish() {
    if (lost_) sink_.lost(0, 0, lost_);
  }

 private:
  bool value(std::uint64_t v, const string_t* text) {
    if (depth_ == 3) {
      if (key_ == "pid")
        e_.pid = static_cast<std::int32_t>(v);
      else if (key_ == "tid")
        e_.tid = static_cast<std::int32_t>(v);
      else if (key_ == "ts")
        e_.ts = text ? us_text_to_ns(*text) : static_cast<std::int64_t>(v) * 1000;
      else if (key_ == "dur")
        e_.dur = text ? us_text_to_ns(*text) : static_cast<std::int64_t>(v) * 1000;
    } else if (depth_ == 4 && args_) {
      if (key_ == "ret")
        e_.has_ret = true, e_.ret = v;
      else if (key_.size() == 4 && key_.rfind("arg", 0) == 0 && key_[3] >= '0' &&
               key_[3] < '0' + kMaxArgs) {
        int i = key_[3] - '0';
        e_.arg[static_cast<std::size_t>(i)] = v;
        e_.args = std::max(e_.args, i + 1);
      }
    } else if (depth_ == 2 && other_ && key_ == "records_lost") {
      lost_ = v;
    }
    return true;
  }
  std::uint32_t function(const std::string& name) {
    auto [it, added] = functions_.try_emplace(name, static_cast<std::uint32_t>(functions_.size()));
    if (added) sink_.function(it->second, name);
    return it->second;
  }
  void dispatch() {
    ++count_;
    if (e_.ph == "M") {
      if (e_.name == "thread_name") sink_.thread_name(e_.pid, e_.tid, e_.arg_name);
      if (e_.name == "process_name") sink_.process_name(e_.pid, e_.arg_name);
      return;
    }
    bool x = e_.ph == "X" && e_.dur >= 0, b = e_.ph == "B", orphan = e_.ph == "i" && e_.s == "t";
    if (!x && !b && !orphan) return;  // not one of record's: another tool's event
    if (!arg_count_known_) {
      arg_count_known_ = true;
      sink_.arg_count(e_.args);
    }
    Call c;
    c.pid = e_.pid, c.tid = e_.tid, c.function = function(e_.name);
    c.start_ns = c.end_ns = e_.ts;
    c.args = e_.arg;
    c.ret = e_.ret;
    if (x) c.end_ns = e_.ts + e_.dur, c.end = e_.unwound ? End::unwound : End::returned;
    if (b) c.end = End::unmatched, c.why = e_.why;
    if (orphan) c.end = End::orphan;
    sink_.call(c);
  }

  Sink& sink_;
  std::unordered_map<std::string, std::uint32_t> functions_;
  Event e_;
  std::string key_;
  int depth_ = 0;
  bool top_ = false, events_ = false, seen_events_ = false, args_ = false, other_ = false;
  bool arg_count_known_ = false;
  std::uint64_t lost_ = 0, count_ = 0;
  std::size_t error_at_ = 0;
  std::string error_, token_;
};

void check_parse(const std::string& path, const Parser& parser, bool ok, std::size_t size) {
  if (ok && !parser.seen_events())
    throw UsageError(path + ": JSON without traceEvents, not a Chrome trace of probecost record");
  if (ok) return;
  if (!parser.top() || (!parser.seen_events() && parser.error_at() < size))
    throw UsageError(path + ": not a recording (not Chrome trace-event JSON: " + parser.error() +
                     ")");
  if (parser.error_at() >= size)
    throw Error(path + ": cut short at byte " + std::to_string(size) + " after " +
                std::to_string(parser.events()) +
                " events (a recording that was not finished, or a truncated copy)");
  throw Error(path + ": bad JSON at byte " + std::to_string(parser.error_at()) + " after " +
              std::to_string(parser.events()) + " events: " + parser.error());
}

}  // namespace

void read_chrome(const std::string& path, Sink& sink) {
  sink.start(Format::chrome);
  Parser parser(sink);
  Mapped file(path);
  bool ok = false;
  std::size_t size = file.size();
  if (file.data()) {
    ok = Json::sax_parse(file.data(), file.data() + size, &parser);
  } else {  // a FIFO, or an empty file
    std::ifstream in(path, std::ios::binary);
    ok = Json::sax_parse(in, &parser);
    size = parser.error_at();
  }
  check_parse(path, parser, ok, size);
  parser.finish();
}

}  // namespace probecost::replay
