// record's CTF directory (record/ctf.hpp) read back: the metadata's clock, probes and argument
// count, then each thread's stream packet by packet, paired as record pairs them; USDT markers'
// events (an event class per marker probe, its fields its arguments) paired as record pairs
// them (record/markers.hpp).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "common/error.hpp"
#include "record/ctf.hpp"
#include "record/markers.hpp"
#include "record/pairing.hpp"
#include "replay/recording.hpp"

namespace probecost::replay {

namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kMagic = 0xC1FC1FC1;
constexpr std::size_t kPreamble = 32 + 48;           // packet.header + packet.context
constexpr std::size_t kMaxPacket = 64 << 20;         // record writes 64 KiB ones
constexpr std::size_t kEventHeader = 2 + 8 + 4 + 4;  // id, timestamp, pid, tid

struct Metadata {
  std::uint64_t freq = 0;
  std::int64_t offset_s = 0;
  std::uint64_t offset = 0;
  int arg_count = 0;
  bool stacks = false;  // record --stacks: each entry ends with a string, its stack
  std::vector<std::string> probes;
  // The probes as record saw them: a marker's name, role and arguments from its event class.
  std::vector<record::ProbeInfo> infos;
};

std::string slurp(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error::from_errno("cannot read " + file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The integer after "NAME = " in `text` (after `from`), or a UsageError naming what is missing.
std::int64_t field(const std::string& text, const std::string& name, const fs::path& file,
                   std::size_t from = 0) {
  std::size_t at = text.find("\t" + name + " = ", from);
  if (at == std::string::npos)
    throw UsageError(file.string() + ": no " + name + " (not the metadata of probecost record)");
  return std::strtoll(text.c_str() + at + name.size() + 4, nullptr, 10);
}

// The labels of the probe_t enumeration, in their order ("label" = i).
std::vector<std::string> probe_labels(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = text.find("typealias enum : uint32_t {");
  std::size_t end = text.find("} := probe_t;", at);
  if (at == std::string::npos || end == std::string::npos) return out;
  for (std::size_t q = text.find('"', at); q != std::string::npos && q < end;) {
    std::string label;
    for (++q; q < end && text[q] != '"'; ++q) {
      if (text[q] == '\\') ++q;
      label += text[q];
    }
    out.push_back(label);
    q = text.find('\n', q);
    q = q == std::string::npos ? q : text.find('"', q);
  }
  return out;
}

// The text of the TSDL string literal at `q` (its opening quote).
std::string literal(const std::string& text, std::size_t q) {
  std::string out;
  for (++q; q < text.size() && text[q] != '"'; ++q) {
    if (text[q] == '\\') ++q;
    if (q < text.size()) out += text[q];
  }
  return out;
}

// Each marker's event class (record/ctf.hpp): "event {\n\tname = "python:line";\n\tid = 6;
// ... fields := struct {\n\t\tprobe_t probe;\n\t\tstring _file;\n ...\t};".
void read_markers(const std::string& text, const fs::path& file, Metadata& m) {
  for (const auto& label : m.probes) m.infos.push_back({label, label, "", 0});
  for (std::size_t at = text.find("event {\n"); at != std::string::npos;
       at = text.find("event {\n", at + 1)) {
    std::int64_t id = field(text, "id", file, at);
    if (id < record::kFirstMarkerEvent) continue;
    auto probe = static_cast<std::size_t>(id - record::kFirstMarkerEvent);
    if (probe >= m.infos.size()) throw UsageError(file.string() + ": a marker of no probe");
    record::ProbeInfo& p = m.infos[probe];
    p.function = literal(text, text.find('"', at));
    p.marker = record::MarkerRole::instant;
    std::size_t f = text.find("fields := struct {\n", at), end = text.find("\t};", f);
    std::istringstream fields(text.substr(f, end - f));
    std::string line;
    std::getline(fields, line);  // "fields := struct {"
    while (std::getline(fields, line)) {
      std::istringstream words(line);
      std::string type, name;
      words >> type >> name;
      if (type == "probe_t" || name.size() < 3) continue;
      p.marker_args.push_back({name.substr(1, name.size() - 2), type == "string"});
    }
  }
  record::assign_marker_roles(m.infos);
}

Metadata read_metadata(const fs::path& dir) {
  fs::path file = dir / "metadata";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw UsageError(dir.string() + ": a directory without a metadata file, not a CTF recording");
  std::string text = slurp(file);
  if (text.rfind("/* CTF 1.8 */", 0) != 0)
    throw UsageError(file.string() + ": not CTF 1.8 metadata as probecost record writes it");
  if (text.find("tracer_name = \"probecost\";") == std::string::npos)
    throw UsageError(file.string() +
                     ": a CTF trace not written by probecost record (babeltrace2 "
                     "prints any CTF trace)");
  Metadata m;
  std::size_t clock = text.find("clock {");
  m.freq = static_cast<std::uint64_t>(field(text, "freq", file, clock));
  m.offset_s = field(text, "offset_s", file, clock);
  m.offset = static_cast<std::uint64_t>(field(text, "offset", file, clock));
  m.arg_count = static_cast<int>(field(text, "arg_count", file));
  std::size_t env = text.find("env {");
  m.stacks = text.find("\tstacks = 1;", env) < text.find("};", env);
  m.probes = probe_labels(text);
  read_markers(text, file, m);
  if (m.freq == 0 || m.arg_count < 0 || m.arg_count > kMaxArgs)
    throw UsageError(file.string() + ": a clock frequency of 0 or an argument count past 6");
  return m;
}

template <typename T>
T get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

const char* unmatched_text(record::Unmatched why) {
  switch (why) {
    case record::Unmatched::skipped:
      return "an outer frame returned first (unwound past)";
    case record::Unmatched::evicted:
      return "stack too deep (returns lost)";
    case record::Unmatched::thread_gone:
      return "its thread exited";
    case record::Unmatched::open_at_end:
      return "still running when the recording ended";
  }
  return "unknown";
}

// The pairing's calls, as replay's.
class ToSink : public record::Output {
 public:
  ToSink(Sink& sink, const Metadata& m) : sink_(sink), m_(m) {}

  std::int64_t ns(std::uint64_t tsc) const {
    auto cycles = static_cast<__int128>(m_.offset) + tsc;
    return m_.offset_s * 1'000'000'000 +
           static_cast<std::int64_t>(cycles * 1'000'000'000 / m_.freq);
  }
  void call(const record::Event& entry, const record::Event& end) override {
    Call c = from(entry);
    if (entry.kind == record::EventKind::marker) c.function = marker_call(entry);
    c.end = end.kind == record::EventKind::unwound ? End::unwound : End::returned;
    c.end_ns = ns(end.tsc);
    c.ret = end.ret;
    sink_.call(c);
  }
  void unmatched(const record::Event& entry, record::Unmatched why) override {
    Call c = from(entry);
    if (entry.kind == record::EventKind::marker) c.function = marker_call(entry);
    c.end = End::unmatched;
    c.why = unmatched_text(why);
    sink_.call(c);
  }
  void orphan(const record::Event& end) override {
    Call c = from(end);
    c.end = End::orphan;
    c.ret = end.ret;
    sink_.call(c);
  }
  void instant(const record::Event& e) override {
    sink_.marker(e.pid, e.tid, m_.infos.at(e.probe).function);
  }
  std::uint64_t intern(const std::string& text) {
    auto [it, added] = ids_.try_emplace(text, strings_.size());
    if (added) strings_.push_back(text);
    return it->second;
  }

 private:
  // The function a marker's call is: named by its entry's name argument, a new one after the
  // probes the first time.
  std::uint32_t marker_call(const record::Event& entry) {
    const record::ProbeInfo& p = m_.infos.at(entry.probe);
    int i = record::marker_name_arg(p);
    std::string name = record::marker_pair(p);
    if (i >= 0 && entry.text & (1u << i) &&
        entry.args[static_cast<std::size_t>(i)] < strings_.size())
      name = strings_[entry.args[static_cast<std::size_t>(i)]];
    auto [it, added] =
        calls_.try_emplace(name, static_cast<std::uint32_t>(m_.probes.size() + calls_.size()));
    if (added) sink_.function(it->second, name);
    return it->second;
  }
  Call from(const record::Event& e) const {
    Call c;
    c.pid = e.pid, c.tid = e.tid, c.function = e.probe;
    c.start_ns = c.end_ns = ns(e.tsc);
    std::copy(e.args.begin(), e.args.end(), c.args.begin());
    return c;
  }
  Sink& sink_;
  const Metadata& m_;
  std::vector<std::string> strings_;
  std::unordered_map<std::string, std::uint64_t> ids_;
  std::unordered_map<std::string, std::uint32_t> calls_;
};

class StreamReader {
 public:
  StreamReader(const fs::path& file, std::int32_t pid, std::int32_t tid, const Metadata& m,
               record::Pairing& pairing, record::MarkerPairing& markers, ToSink& out, Sink& sink)
      : file_(file),
        m_(m),
        pairing_(pairing),
        markers_(markers),
        out_(out),
        sink_(sink),
        in_(file, std::ios::binary),
        pid_(pid),
        tid_(tid) {
    if (!in_) throw Error::from_errno("cannot read " + file.string());
  }
  // Every packet; the stream's thread and the records it lost.
  void read() {
    while (packet()) {
    }
    if (discarded_) sink_.lost(pid_, tid_, discarded_);
  }

 private:
  [[noreturn]] void cut(const std::string& what) const {
    throw Error(file_.string() + ": " + what + " at byte " + std::to_string(at_) +
                " (a recording cut short, or not record's)");
  }
  bool packet() {
    char head[kPreamble];
    in_.read(head, kPreamble);
    if (in_.gcount() == 0) return false;
    if (static_cast<std::size_t>(in_.gcount()) < kPreamble) cut("a packet header cut short");
    if (get<std::uint32_t>(head) != kMagic) cut("no CTF packet magic");
    std::uint64_t content = get<std::uint64_t>(head + 48) / 8,
                  size = get<std::uint64_t>(head + 56) / 8;
    if (content < kPreamble || content > size || size > kMaxPacket) cut("a packet of a bad size");
    discarded_ = get<std::uint64_t>(head + 72);
    body_.resize(size - kPreamble);
    in_.read(body_.data(), static_cast<std::streamsize>(body_.size()));
    if (static_cast<std::size_t>(in_.gcount()) < body_.size()) cut("a packet cut short");
    events(body_.data(), body_.data() + (content - kPreamble));
    at_ += size;
    return true;
  }
  void events(const char* p, const char* end) {
    std::size_t fixed = 4 + 8 * static_cast<std::size_t>(m_.arg_count);
    while (p < end) {
      if (end - p < static_cast<std::ptrdiff_t>(kEventHeader)) cut("an event cut short");
      auto id = get<std::uint16_t>(p);
      record::Event e;
      e.tsc = get<std::uint64_t>(p + 2);
      e.pid = get<std::int32_t>(p + 10);
      e.tid = get<std::int32_t>(p + 14);
      p += kEventHeader;
      if (id == 3) {  // thread_name: a NUL-terminated string
        const char* nul =
            static_cast<const char*>(std::memchr(p, 0, static_cast<std::size_t>(end - p)));
        if (!nul) cut("a thread name cut short");
        sink_.thread_name(e.pid, e.tid, std::string(p, nul));
        p = nul + 1;
        continue;
      }
      if (id >= record::kFirstMarkerEvent) {
        p = marker(e, static_cast<std::size_t>(id - record::kFirstMarkerEvent), p, end);
        continue;
      }
      std::size_t need = id == 0 ? fixed : id == 1 ? 12 : 4;
      if (id > 3 || static_cast<std::size_t>(end - p) < need) cut("an unknown or cut-short event");
      e.probe = get<std::uint32_t>(p);
      if (e.probe >= m_.probes.size())
        cut(std::string("an event of probe ") +=
            std::to_string(e.probe) + " the metadata does not have");
      e.kind = id == 0   ? record::EventKind::entry
               : id == 1 ? record::EventKind::exit
                         : record::EventKind::unwound;
      if (id == 0)
        for (int i = 0; i < m_.arg_count; ++i)
          e.args[static_cast<std::size_t>(i)] = get<std::uint64_t>(p + 4 + 8 * i);
      if (id == 1) e.ret = get<std::uint64_t>(p + 4);
      p += need;
      if (id == 0 && m_.stacks) {  // the stack's text: not replayed
        const char* nul =
            static_cast<const char*>(std::memchr(p, 0, static_cast<std::size_t>(end - p)));
        if (!nul) cut("an entry's stack cut short");
        p = nul + 1;
      }
      pairing_.add(e);
    }
  }

  // A marker's event: {probe, its arguments (a NUL-terminated string or an int64 each)}.
  const char* marker(record::Event& e, std::size_t probe, const char* p, const char* end) {
    if (probe >= m_.infos.size() || m_.infos[probe].marker == record::MarkerRole::none ||
        end - p < 4 || get<std::uint32_t>(p) != probe)
      cut("a marker event the metadata does not describe");
    e.kind = record::EventKind::marker;
    e.probe = static_cast<std::uint32_t>(probe);
    p += 4;
    const auto& args = m_.infos[probe].marker_args;
    for (std::size_t i = 0; i < args.size() && i < e.args.size(); ++i) {
      if (!args[i].text) {
        if (end - p < 8) cut("a marker event cut short");
        e.args[i] = get<std::uint64_t>(p);
        p += 8;
        continue;
      }
      const char* nul =
          static_cast<const char*>(std::memchr(p, 0, static_cast<std::size_t>(end - p)));
      if (!nul) cut("a marker's string cut short");
      e.args[i] = out_.intern(std::string(p, nul));
      e.text |= static_cast<std::uint8_t>(1u << i);
      p = nul + 1;
    }
    markers_.add(e);
    return p;
  }

  fs::path file_;
  const Metadata& m_;
  record::Pairing& pairing_;
  record::MarkerPairing& markers_;
  ToSink& out_;
  Sink& sink_;
  std::ifstream in_;
  std::int32_t pid_, tid_;
  std::vector<char> body_;
  std::size_t at_ = 0;
  std::uint64_t discarded_ = 0;
};

struct StreamFile {
  std::tuple<long, long, long> thread;  // pid, tid, generation
  fs::path path;
  bool operator<(const StreamFile& o) const { return thread < o.thread; }
};

// "thread-PID-TID" and "thread-PID-TID.N" (the Nth thread that had that tid): by thread, then
// in the order the threads came.
std::vector<StreamFile> stream_files(const fs::path& dir) {
  std::vector<StreamFile> files;
  for (const auto& f : fs::directory_iterator(dir)) {
    std::string name = f.path().filename().string();
    long pid = 0, tid = 0, gen = 0;
    if (name.rfind("thread-", 0) != 0 || !f.is_regular_file()) continue;
    if (std::sscanf(name.c_str(), "thread-%ld-%ld.%ld", &pid, &tid, &gen) < 2) continue;
    files.push_back({{pid, tid, gen}, f.path()});
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

void read_ctf(const std::string& dir, Sink& sink) {
  Metadata m = read_metadata(dir);
  sink.start(TraceFormat::ctf);
  for (std::uint32_t i = 0; i < m.probes.size(); ++i) sink.function(i, m.probes[i]);
  sink.arg_count(m.arg_count);
  ToSink out(sink, m);
  record::Pairing pairing(out);
  record::RunInfo run;
  run.probes = m.infos;
  record::MarkerPairing markers(run, out);
  std::vector<StreamFile> files = stream_files(dir);
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto [pid, tid, generation] = files[i].thread;
    auto p = static_cast<std::int32_t>(pid), t = static_cast<std::int32_t>(tid);
    StreamReader(files[i].path, p, t, m, pairing, markers, out, sink).read();
    // The same tid again later: this thread exited first (record made it a stream of its own).
    if (i + 1 < files.size() && std::get<0>(files[i + 1].thread) == pid &&
        std::get<1>(files[i + 1].thread) == tid)
      pairing.thread_exited(p, t), markers.thread_exited(p, t);
  }
  pairing.finish();
  markers.finish();
}

}  // namespace probecost::replay
