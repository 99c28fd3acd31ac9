#include "record/ctf.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/error.hpp"

namespace probecost::record {

namespace {

constexpr std::uint32_t kMagic = 0xC1FC1FC1;
// packet.header (32 bytes) and packet.context (48 bytes) as the metadata declares them.
constexpr std::size_t kPacketPreamble = 32 + 48;

// Little-endian, as the metadata's byte_order (x86-64 is).
template <typename T>
void put(std::string& out, T v) {
  char bytes[sizeof v];
  std::memcpy(bytes, &v, sizeof v);
  out.append(bytes, sizeof v);
}

Uuid random_uuid() {
  std::random_device rd;
  Uuid u;
  for (auto& b : u) b = static_cast<std::uint8_t>(rd());
  u[6] = static_cast<std::uint8_t>((u[6] & 0x0F) | 0x40);  // version 4 (random)
  u[8] = static_cast<std::uint8_t>((u[8] & 0x3F) | 0x80);  // RFC 4122 variant
  return u;
}

std::uint64_t key(std::int32_t pid, std::int32_t tid) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(pid)) << 32 |
         static_cast<std::uint32_t>(tid);
}

void append_file(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error::from_errno("cannot write " + file.string());
}

CtfEvent ctf_event(EventKind kind) {
  switch (kind) {
    case EventKind::entry:
      return CtfEvent::entry;
    case EventKind::exit:
      return CtfEvent::exit;
    case EventKind::unwound:
    case EventKind::marker:  // not written through here (CtfWriter::marker)
      return CtfEvent::unwound;
  }
  return CtfEvent::unwound;
}

void make_empty_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec))
    // The command line said so first (cli/trace_place.cpp); here, for any other caller.
    throw Error(dir.string() +
                " exists and is not empty: a CTF trace needs a directory of its own");
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create " + dir.string() + ": " + ec.message());
}

}  // namespace

CtfWriter::CtfWriter(const std::filesystem::path& dir, const RunInfo& run)
    : dir_(dir), run_(run), uuid_(random_uuid()) {
  make_empty_dir(dir_);
  std::ofstream meta(dir_ / "metadata", std::ios::binary | std::ios::trunc);
  meta << ctf_metadata(run_, uuid_);
  meta.close();
  if (!meta) throw Error::from_errno("cannot write " + (dir_ / "metadata").string());
}

CtfWriter::~CtfWriter() {
  try {
    finish();
  } catch (...) {
    // A destructor cannot report it; finish() does.
  }
}

CtfWriter::Stream& CtfWriter::stream(std::int32_t pid, std::int32_t tid) {
  auto [it, added] = streams_.try_emplace(key(pid, tid));
  Stream& s = it->second;
  if (!added) return s;
  s.pid = pid;
  s.tid = tid;
  s.instance = instances_++;
  std::ostringstream name;
  name << "thread-" << pid << '-' << tid;
  // A tid the kernel gave to a new thread after the first one exited: a stream of its own.
  if (std::uint32_t generation = generations_[key(pid, tid)]++) name << '.' << generation;
  s.file = dir_ / name.str();
  return s;
}

void CtfWriter::begin_event(Stream& s, std::uint16_t id, std::uint64_t tsc) {
  if (tsc < s.last_tsc) {
    ++clamped_;
    tsc = s.last_tsc;
  }
  if (s.content.empty()) s.first_tsc = tsc;
  s.last_tsc = tsc;
  put(s.content, id);
  put(s.content, tsc);
  put(s.content, s.pid);
  put(s.content, s.tid);
}

// Room for one more event of at most `bytes` (256: header, context, probe, six arguments; or a
// name cut to 64 bytes) in the stream's packet.
CtfWriter::Stream& CtfWriter::writable(std::int32_t pid, std::int32_t tid, std::size_t bytes) {
  Stream& s = stream(pid, tid);
  if (s.content.size() + bytes > kPacketBytes - kPacketPreamble) flush(s);
  return s;
}

void CtfWriter::count_held(std::size_t bytes) {
  held_ += bytes;
  if (held_ > kHeldBytes) flush_all();
}

void CtfWriter::string(std::uint32_t id, const std::string& text) {
  if (strings_.size() <= id) strings_.resize(id + 1);
  // A CTF string ends at its first NUL.
  strings_[id] = text.substr(0, std::min(kMaxString, std::strlen(text.c_str())));
}

// {probe, each argument: a NUL-terminated string or an int64}
void CtfWriter::marker(const Event& e) {
  const auto& args = run_.probes.at(e.probe).marker_args;
  Stream& s = writable(e.pid, e.tid, 256 + args.size() * (kMaxString + 1));
  std::size_t before = s.content.size();
  begin_event(s, static_cast<std::uint16_t>(kFirstMarkerEvent + e.probe), e.tsc);
  put(s.content, e.probe);
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].text) {
      put(s.content, e.args[i]);
      continue;
    }
    bool text = e.text & (1u << i) && e.args[i] < strings_.size();
    std::string hex;
    if (!text) {
      std::ostringstream out;
      out << "0x" << std::hex << e.args[i];
      hex = out.str();
    }
    const std::string& v = text ? strings_[e.args[i]] : hex;
    s.content.append(v.c_str(), v.size() + 1);
  }
  count_held(s.content.size() - before);
}

void CtfWriter::event(const Event& e) {
  if (e.kind == EventKind::marker) return marker(e);
  static const std::string kNone;
  std::string why;
  const std::string* text = &kNone;
  if (e.kind == EventKind::entry && run_.stacks) {
    if (e.stack && e.stack < folded_.size())
      text = &folded_[e.stack];
    else if (e.no_stack != StackMissing::none)
      text = &(why.append("[").append(stack_missing_text(e.no_stack)).append("]"));
  }
  Stream& s = writable(e.pid, e.tid, 256 + text->size() + 1);
  std::size_t before = s.content.size();
  begin_event(s, static_cast<std::uint16_t>(ctf_event(e.kind)), e.tsc);
  put(s.content, e.probe);
  if (e.kind == EventKind::entry)
    for (int i = 0; i < run_.arg_count; ++i) put(s.content, e.args[static_cast<std::size_t>(i)]);
  if (e.kind == EventKind::exit) put(s.content, e.ret);
  if (e.kind == EventKind::entry && run_.stacks)
    s.content.append(text->c_str(), std::strlen(text->c_str()) + 1);
  count_held(s.content.size() - before);
}

// Folded as flamegraph.pl reads it (outermost first, ';' between frames), at most
// kStackTextBytes: a deeper stack keeps its innermost frames after "...;" (an event must fit
// a packet).
void CtfWriter::stack(std::uint32_t id, const std::vector<std::string>& frames) {
  std::string text;
  for (const auto& f : frames) text += (text.empty() ? "" : ";") + f;
  if (text.size() > kStackTextBytes) text = "...;" + text.substr(text.size() - kStackTextBytes);
  if (folded_.size() <= id) folded_.resize(id + 1);
  folded_[id] = std::move(text);
}

void CtfWriter::thread_name(std::int32_t pid, std::int32_t tid, const std::string& name,
                            std::uint64_t tsc) {
  Stream& s = writable(pid, tid);
  std::size_t before = s.content.size();
  begin_event(s, static_cast<std::uint16_t>(CtfEvent::thread_name), tsc);
  // A CTF string ends at its first NUL.
  std::string bounded = name.substr(0, 64);
  s.content.append(bounded.c_str(), std::strlen(bounded.c_str()) + 1);
  count_held(s.content.size() - before);
}

void CtfWriter::lost(const Lost& l) {
  Stream& s = stream(l.pid, l.tid);
  s.discarded += l.count;
  s.lost_tsc = std::max(s.lost_tsc, l.tsc);
}

void CtfWriter::thread_exited(std::int32_t pid, std::int32_t tid) {
  auto it = streams_.find(key(pid, tid));
  if (it == streams_.end()) return;
  flush(it->second);
  streams_.erase(it);
}

void CtfWriter::flush(Stream& s) {
  if (s.content.empty() && s.discarded == s.discarded_written) return;
  std::string packet;
  packet.reserve(kPacketPreamble + s.content.size());
  put(packet, kMagic);
  packet.append(reinterpret_cast<const char*>(uuid_.data()), uuid_.size());
  put(packet, std::uint32_t{0});  // stream_id: the one stream class
  put(packet, s.instance);
  std::uint64_t bits = (kPacketPreamble + s.content.size()) * 8;
  // A packet with no events that reports a loss (a thread the ring does not name has no
  // events) spans the time it was counted, not the clock's zero.
  bool empty = s.content.empty();
  std::uint64_t end = empty ? std::max(s.last_tsc, s.lost_tsc) : s.last_tsc;
  put(packet, empty ? end : s.first_tsc);  // timestamp_begin
  put(packet, end);                        // timestamp_end
  put(packet, bits);                       // content_size
  put(packet, bits);                       // packet_size: no padding
  put(packet, s.seq++);
  put(packet, s.discarded);  // events_discarded: a running count, as LTTng's
  packet += s.content;
  held_ -= std::min(held_, s.content.size());
  s.content.clear();
  s.discarded_written = s.discarded;
  append_file(s.file, packet);
}

void CtfWriter::flush_all() {
  for (auto& [k, s] : streams_) flush(s);
}

void CtfWriter::finish() {
  if (finished_) return;
  finished_ = true;
  flush_all();
}

}  // namespace probecost::record
