// The TSDL metadata of a probecost CTF trace (CTF 1.8, "Trace Stream Description Language").
#include <unistd.h>

#include <cstdio>
#include <set>
#include <sstream>

#include "record/ctf.hpp"

namespace probecost::record {

namespace {

std::string uuid_text(const Uuid& u) {
  char buf[40];
  std::snprintf(buf, sizeof buf,
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                u[15]);
  return buf;
}

// A TSDL string literal: quotes and backslashes escaped, control bytes dropped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// The probes as an enumeration, labelled by function; a name that repeats (overloads probed
// by address, one function in two modules) gets its spec too, so every label is one probe.
std::string probe_enum(const RunInfo& run) {
  if (run.probes.empty()) return "typealias uint32_t := probe_t;\n";
  std::ostringstream out;
  out << "typealias enum : uint32_t {\n";
  std::set<std::string> used;
  for (std::size_t i = 0; i < run.probes.size(); ++i) {
    const ProbeInfo& p = run.probes[i];
    std::string label = p.function.empty() ? p.spec : p.function;
    if (used.count(label)) label += " (" + p.spec + ")";
    if (used.count(label)) label = "probe " + std::to_string(i);
    used.insert(label);
    out << "\t" << quoted(label) << " = " << i << (i + 1 < run.probes.size() ? ",\n" : "\n");
  }
  out << "} := probe_t;\n";
  return out.str();
}

std::string clock_block(const RunInfo& run, const Uuid& uuid) {
  // The clock's value 0 in the epoch: offset_s seconds plus offset cycles.
  const tsc::Calibration& c = run.clock;
  std::int64_t epoch_ns = tsc::Clock(c).realtime_ns(0);
  std::int64_t s = epoch_ns / 1'000'000'000, rem = epoch_ns % 1'000'000'000;
  if (rem < 0) rem += 1'000'000'000, --s;
  auto cycles = static_cast<std::uint64_t>(static_cast<__int128>(rem) * c.hz / 1'000'000'000);
  std::ostringstream out;
  out << "clock {\n\tname = tsc;\n\tuuid = " << quoted(uuid_text(uuid))
      << ";\n\tdescription = \"x86 TSC, calibrated against CLOCK_MONOTONIC\";\n\tfreq = " << c.hz
      << ";\n\tprecision = 1;\n\toffset_s = " << s << ";\n\toffset = " << cycles
      << ";\n\tabsolute = FALSE;\n};\n\n"
      << "typealias integer { size = 64; align = 8; signed = false; map = clock.tsc.value; } "
         ":= uint64_tsc_t;\n\n";
  return out.str();
}

const char* kTypes =
    "typealias integer { size = 8; align = 8; signed = false; } := uint8_t;\n"
    "typealias integer { size = 16; align = 8; signed = false; } := uint16_t;\n"
    "typealias integer { size = 32; align = 8; signed = false; } := uint32_t;\n"
    "typealias integer { size = 64; align = 8; signed = false; } := uint64_t;\n"
    "typealias integer { size = 32; align = 8; signed = true; } := int32_t;\n"
    "typealias integer { size = 64; align = 8; signed = true; } := int64_t;\n\n";

const char* kStream =
    "stream {\n\tid = 0;\n"
    "\tpacket.context := struct {\n"
    "\t\tuint64_tsc_t timestamp_begin;\n\t\tuint64_tsc_t timestamp_end;\n"
    "\t\tuint64_t content_size;\n\t\tuint64_t packet_size;\n"
    "\t\tuint64_t packet_seq_num;\n\t\tuint64_t events_discarded;\n\t};\n"
    "\tevent.header := struct {\n\t\tuint16_t id;\n\t\tuint64_tsc_t timestamp;\n\t};\n"
    "\tevent.context := struct {\n\t\tint32_t pid;\n\t\tint32_t tid;\n\t};\n};\n\n";

std::string event_block(CtfEvent id, const char* name, const std::string& fields) {
  std::ostringstream out;
  out << "event {\n\tname = \"" << name << "\";\n\tid = " << static_cast<int>(id)
      << ";\n\tstream_id = 0;\n\tfields := struct {\n"
      << fields << "\t};\n};\n\n";
  return out.str();
}

std::string marker_block(std::size_t id, const std::string& name, const std::string& fields) {
  std::ostringstream out;
  out << "event {\n\tname = " << quoted(name) << ";\n\tid = " << id
      << ";\n\tstream_id = 0;\n\tfields := struct {\n"
      << fields << "\t};\n};\n\n";
  return out.str();
}

}  // namespace

std::string ctf_metadata(const RunInfo& run, const Uuid& uuid) {
  std::ostringstream out;
  out << "/* CTF 1.8 */\n\n" << kTypes;
  out << "trace {\n\tmajor = 1;\n\tminor = 8;\n\tuuid = " << quoted(uuid_text(uuid))
      << ";\n\tbyte_order = le;\n\tpacket.header := struct {\n\t\tuint32_t magic;\n"
      << "\t\tuint8_t uuid[16];\n\t\tuint32_t stream_id;\n\t\tuint64_t stream_instance_id;\n"
      << "\t};\n};\n\n";
  out << "env {\n\ttracer_name = \"probecost\";\n\ttracer_version = " << quoted(PROBECOST_VERSION)
      << ";\n\thostname = " << quoted(hostname())
      << ";\n\tclock_source = \"tsc\";\n\tprobes = " << run.probes.size()
      << ";\n\targ_count = " << run.arg_count << ";\n";
  if (run.stacks) out << "\tstacks = 1;\n";
  out << "};\n\n";
  out << clock_block(run, uuid) << probe_enum(run) << "\n" << kStream;
  std::string args;
  for (int i = 0; i < run.arg_count; ++i) args += "\t\tint64_t arg" + std::to_string(i) + ";\n";
  if (run.stacks) args += "\t\tstring stack;\n";
  out << event_block(CtfEvent::entry, "probecost:entry", "\t\tprobe_t probe;\n" + args);
  out << event_block(CtfEvent::exit, "probecost:return", "\t\tprobe_t probe;\n\t\tint64_t ret;\n");
  out << event_block(CtfEvent::unwound, "probecost:unwound", "\t\tprobe_t probe;\n");
  out << event_block(CtfEvent::thread_name, "probecost:thread_name", "\t\tstring name;\n");
  for (std::size_t i = 0; i < run.probes.size(); ++i) {
    const ProbeInfo& p = run.probes[i];
    if (p.marker == MarkerRole::none) continue;
    std::string fields = "\t\tprobe_t probe;\n";
    for (const MarkerArg& a : p.marker_args)
      fields += std::string("\t\t") + (a.text ? "string" : "int64_t") + " _" + a.name + ";\n";
    out << marker_block(kFirstMarkerEvent + i, p.function, fields);
  }
  return out.str();
}

}  // namespace probecost::record
