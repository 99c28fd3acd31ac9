// record's Chrome JSON (record/chrome.hpp) read back through RapidJSON's SAX reader: one event
// object at a time, never the whole document (nlohmann's SAX parser took 60 s for 40 million
// events, its lexer reading a character at a time). "X" is a call (args.unwound: closed by an
// unwind), "B" one that never returned (args.unmatched says why), "i" a return without its
// entry, "M" a thread's or process's name; otherData.records_lost the records the tracer lost.
// A USDT marker's event has "cat":"usdt": its "X" and "B" are calls of an entry/return pair,
// its "i" a return without its entry when args.entry says so, else an instant (a marker).
#include <fcntl.h>
#include <rapidjson/error/en.h>
#include <rapidjson/filereadstream.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <memory>
#include <string_view>
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
std::int64_t us_text_to_ns(std::string_view text) {
  bool negative = !text.empty() && text[0] == '-';
  const char* p = text.data() + (negative ? 1 : 0);
  const char* end = text.data() + text.size();
  std::int64_t whole = 0;
  auto r = std::from_chars(p, end, whole);
  std::int64_t ns = whole * 1000;
  if (r.ptr < end && *r.ptr == '.') {
    std::int64_t scale = 100;
    for (const char* d = r.ptr + 1; d < end && *d >= '0' && *d <= '9' && scale > 0; ++d)
      ns += (*d - '0') * scale, scale /= 10;
  }
  if (r.ptr < end && (*r.ptr == 'e' || *r.ptr == 'E'))  // not record's, but valid JSON
    return static_cast<std::int64_t>(std::strtod(std::string(text).c_str(), nullptr) * 1000);
  return negative ? -ns : ns;
}

struct Event {
  std::string ph, name, s, why, arg_name, cat;
  bool no_entry = false;  // args.entry: a return without its entry
  std::int32_t pid = 0, tid = 0;
  std::int64_t ts = 0, dur = -1;
  bool has_ret = false, unwound = false;
  std::uint64_t ret = 0;
  int args = 0;  // how many of argN were given (the highest N + 1)
  std::array<std::uint64_t, kMaxArgs> arg{};
  void clear() {
    ph.clear(), name.clear(), s.clear(), why.clear(), arg_name.clear(), cat.clear();
    no_entry = false;
    pid = tid = 0, ts = 0, dur = -1, has_ret = unwound = false, ret = 0, args = 0, arg = {};
  }
};

// A number's text as a register value: "-12", "140737488355328", or a float's whole part.
std::uint64_t integer_text(std::string_view text) {
  bool negative = !text.empty() && text[0] == '-';
  std::uint64_t v = 0;
  auto r = std::from_chars(text.data() + (negative ? 1 : 0), text.data() + text.size(), v);
  if (r.ptr != text.data() + text.size() && *r.ptr != '.')
    v = static_cast<std::uint64_t>(std::strtod(std::string(text).c_str(), nullptr));
  return negative ? 0 - v : v;
}

// RapidJSON's SAX handler: every number comes as its text (kParseNumbersAsStringsFlag), read
// here exactly.
class Parser : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, Parser> {
 public:
  explicit Parser(Sink& sink) : sink_(sink) {}

  bool Default() { return true; }
  bool Bool(bool v) {
    if (depth_ == 4 && args_ && key_ == "unwound") e_.unwound = v;
    return true;
  }
  bool RawNumber(const char* str, rapidjson::SizeType len, bool) {
    return value(std::string_view(str, len));
  }
  bool String(const char* str, rapidjson::SizeType len, bool) {
    std::string_view v(str, len);
    if (depth_ == 3) {
      if (key_ == "ph")
        e_.ph = v;
      else if (key_ == "name")
        e_.name = v;
      else if (key_ == "s")
        e_.s = v;
      else if (key_ == "cat")
        e_.cat = v;
    } else if (depth_ == 4 && args_) {
      if (key_ == "entry")
        e_.no_entry = true;
      else if (key_ == "unmatched")
        e_.why = v;
      else if (key_ == "name")
        e_.arg_name = v;
      else if (v.substr(0, 2) == "0x")
        hex(v.substr(2));
    }
    return true;
  }
  bool StartObject() {
    if (depth_ == 0) top_ = true;
    if (depth_ == 2 && events_) e_.clear();
    if (depth_ == 3 && key_ == "args") args_ = true;
    if (depth_ == 1 && key_ == "otherData") other_ = true;
    ++depth_;
    return true;
  }
  bool Key(const char* str, rapidjson::SizeType len, bool) {
    key_.assign(str, len);
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    --depth_;
    if (depth_ == 3) args_ = false;
    if (depth_ == 2 && events_) dispatch();
    if (depth_ == 1) other_ = false;
    return true;
  }
  bool StartArray() {
    if (depth_ == 1 && key_ == "traceEvents") events_ = seen_events_ = true;
    ++depth_;
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    if (--depth_ == 1) events_ = false;
    return true;
  }

  bool top() const { return top_; }
  bool seen_events() const { return seen_events_; }
  std::uint64_t events() const { return count_; }
  void finish() {
    if (lost_) sink_.lost(0, 0, lost_);
  }

 private:
  void hex(std::string_view digits) {
    std::uint64_t v = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), v, 16);
    store(v, key_);
  }
  bool value(std::string_view text) {
    if (depth_ == 3) {
      if (key_ == "pid")
        e_.pid = static_cast<std::int32_t>(integer_text(text));
      else if (key_ == "tid")
        e_.tid = static_cast<std::int32_t>(integer_text(text));
      else if (key_ == "ts")
        e_.ts = us_text_to_ns(text);
      else if (key_ == "dur")
        e_.dur = us_text_to_ns(text);
    } else if (depth_ == 4 && args_) {
      store(integer_text(text), key_);
    } else if (depth_ == 2 && other_ && key_ == "records_lost") {
      lost_ = integer_text(text);
    }
    return true;
  }
  // args.ret, args.arg0 .. arg5
  void store(std::uint64_t v, const std::string& key) {
    if (key == "ret") {
      e_.has_ret = true, e_.ret = v;
    } else if (key.size() == 4 && key.compare(0, 3, "arg") == 0 && key[3] >= '0' &&
               key[3] < '0' + kMaxArgs) {
      int i = key[3] - '0';
      e_.arg[static_cast<std::size_t>(i)] = v;
      e_.args = std::max(e_.args, i + 1);
    }
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
    bool marker = e_.cat == "usdt";
    if (marker && e_.ph == "i" && !e_.no_entry) return sink_.marker(e_.pid, e_.tid, e_.name);
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
};

constexpr unsigned kFlags = rapidjson::kParseNumbersAsStringsFlag;

void check_parse(const std::string& path, const Parser& parser,
                 const rapidjson::ParseResult& result, std::size_t size) {
  if (!result.IsError() && !parser.seen_events())
    throw UsageError(path + ": JSON without traceEvents, not a Chrome trace of probecost record");
  if (!result.IsError()) return;
  std::string what = rapidjson::GetParseError_En(result.Code());
  if (!parser.top() || (!parser.seen_events() && result.Offset() < size))
    throw UsageError(path + ": not a recording (not Chrome trace-event JSON: " + what + ")");
  if (result.Offset() >= size)
    throw Error(path + ": cut short at byte " + std::to_string(size) + " after " +
                std::to_string(parser.events()) +
                " events (a recording that was not finished, or a truncated copy)");
  throw Error(path + ": bad JSON at byte " + std::to_string(result.Offset()) + " after " +
              std::to_string(parser.events()) + " events: " + what);
}

}  // namespace

void read_chrome(const std::string& path, Sink& sink) {
  sink.start(TraceFormat::chrome);
  Parser parser(sink);
  Mapped file(path);
  rapidjson::Reader reader;
  rapidjson::ParseResult result;
  std::size_t size = file.size();
  if (file.data()) {
    rapidjson::MemoryStream in(file.data(), size);
    result = reader.Parse<kFlags>(in, parser);
  } else {  // a FIFO, or an empty file
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw Error::from_errno("cannot read " + path);
    char buf[1 << 16];
    rapidjson::FileReadStream in(f.get(), buf, sizeof buf);
    result = reader.Parse<kFlags>(in, parser);
    size = result.IsError() ? result.Offset() : 0;
  }
  check_parse(path, parser, result, size);
  parser.finish();
}

}  // namespace probecost::replay
