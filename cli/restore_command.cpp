// probecost restore -p PID [--dry-run] [-f text|json] [-o FILE]
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/format.hpp"
#include "common/paths.hpp"
#include "restore/restore.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

namespace {

std::string hex_byte(std::uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

void write_byte(std::ostream& out, const RestoredByte& b, bool dry_run) {
  out << "  " << b.address.hex() << " " << base_name(b.module) << " "
      << (b.where.empty() ? "?" : b.where) << ": int3";
  if (b.restored || (dry_run && b.why_not.empty())) out << " -> " << hex_byte(b.original);
  if (!b.why_not.empty()) out << ", left alone: " << b.why_not;
  out << "\n";
}

void write_text(std::ostream& out, const RestoreReport& r, bool dry_run) {
  std::size_t ours = 0, put_back = 0;
  for (const auto& b : r.bytes) {
    ours += b.ours;
    put_back += b.ours && (b.restored || (dry_run && b.why_not.empty()));
  }
  out << "probecost restore: process " << r.pid << ": "
      << (dry_run ? "would put back " : "put back ") << put_back << " of the " << ours
      << " int3 byte(s) probecost recorded writing; " << r.bytes.size() - ours
      << " int3 byte(s) of others left alone (compared " << r.mappings_compared
      << " executable mappings with their files)\n";
  for (const auto& j : r.jumps) {
    out << "  jump at " << j.address.hex() << " " << j.where << " (" << j.length
        << " bytes, patched by process " << j.tracer_pid << ", " << j.hits << " hits): " << j.state
        << (j.restored ? ", original bytes put back" : "") << "\n";
  }
  for (const auto& b : r.bytes) {
    if (b.ours) write_byte(out, b, dry_run);
  }
  for (const auto& b : r.bytes) {
    if (!b.ours) write_byte(out, b, dry_run);
  }
  for (const auto& s : r.semaphores) {
    out << "  USDT semaphore at " << s.address.hex() << " " << base_name(s.module)
        << " (raised by process " << s.tracer_pid << "): " << s.before;
    if (s.lowered || (dry_run && s.why_not.empty())) out << " -> " << s.before - 1;
    if (!s.why_not.empty()) out << ", left alone: " << s.why_not;
    out << "\n";
  }
  for (const auto& h : r.handlers) out << "  " << h << "\n";
  for (const auto& n : r.notes) out << "  " << n << "\n";
}

nlohmann::json to_json(const RestoreReport& r) {
  nlohmann::json bytes = nlohmann::json::array();
  for (const auto& b : r.bytes) {
    bytes.push_back({{"address", b.address.hex()},
                     {"module", b.module},
                     {"symbol", b.where},
                     {"original", b.original},
                     {"restored", b.restored},
                     {"ours", b.ours},
                     {"why_not", b.why_not}});
  }
  nlohmann::json jumps = nlohmann::json::array();
  for (const auto& j : r.jumps) {
    jumps.push_back({{"address", j.address.hex()},
                     {"symbol", j.where},
                     {"length", j.length},
                     {"hits", j.hits},
                     {"tracer_pid", j.tracer_pid},
                     {"state", j.state},
                     {"restored", j.restored}});
  }
  nlohmann::json semaphores = nlohmann::json::array();
  for (const auto& x : r.semaphores) {
    semaphores.push_back({{"address", x.address.hex()},
                          {"module", x.module},
                          {"tracer_pid", x.tracer_pid},
                          {"before", x.before},
                          {"after", x.after},
                          {"lowered", x.lowered},
                          {"why_not", x.why_not}});
  }
  return {{"pid", r.pid},
          {"mappings_compared", r.mappings_compared},
          {"bytes", bytes},
          {"jumps", jumps},
          {"semaphores", semaphores},
          {"handlers", r.handlers},
          {"notes", r.notes},
          {"unmapped_bytes", r.unmapped_bytes}};
}

}  // namespace

int restore_command(const std::vector<std::string>& args) {
  pid_t pid = 0;
  std::string format = "text", output;
  po::options_description desc(
      "probecost restore -p PID [options]\n\n"
      "Puts back what a probecost that was killed left in a process, and nothing else: the\n"
      "int3 bytes and jumps it recorded writing (in the process itself), where they are still\n"
      "exactly what it wrote, in the file mapping it wrote them into; and the program's own\n"
      "SIGTRAP disposition, if probecost's handler is still installed; the USDT semaphores it\n"
      "raised and neither it nor its guardian lowered, by the one it added; its trampolines and\n"
      "call buffers, unmapped where no thread is in them. Every thread is stopped\n"
      "meanwhile, one already trapped on an int3 rewound. Other int3 bytes (the program's own,\n"
      "a debugger's, a kernel uprobe's) are reported and left alone.\n\noptions");
  desc.add_options()("help,h", "this help")("pid,p", po::value(&pid), "the process")(
      "dry-run,n", "report what would be put back; write nothing")(
      "format,f", po::value(&format), "text or json")("output,o", po::value(&output),
                                                      "write the report to FILE");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see 'probecost restore --help')");
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (pid <= 0) throw UsageError("which process? give -p PID");
  Format f = parse_format(format, {Format::Text, Format::Json});
  std::ofstream file;
  if (!output.empty() && output != "-") {
    file.open(output);
    if (!file) throw UsageError("cannot write " + output + ": " + std::strerror(errno));
  }
  std::ostream& out = file.is_open() ? file : std::cout;
  bool dry_run = vm.count("dry-run") > 0;
  RestoreReport report = restore_process(pid, dry_run);
  if (f == Format::Json) {
    out << json_text(to_json(report), 2) << "\n";
  } else {
    write_text(out, report, dry_run);
  }
  out.flush();
  if (!out) throw Error::from_errno("writing the report");
  return 0;
}

}  // namespace probecost::cli
