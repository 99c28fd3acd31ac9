#include "inferior/options.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace probecost::inferior {

void usage_error(const std::string& msg) {
  std::fprintf(stderr, "probecost-inferior: %s\n", msg.c_str());
  std::exit(2);
}

namespace {

std::uint64_t parse_count(const char* s, const char* what) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0 || s[0] == '-') {
    usage_error(std::string("bad ") + what + " '" + s + "': want a whole number > 0");
  }
  return v;
}

std::vector<int> parse_cpus(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    char* end = nullptr;
    long c = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end || c < 0 || c > 4095) {
      usage_error("bad --pin-threads '" + text + "': want CPU numbers such as 0,1");
    }
    cpus.push_back(static_cast<int>(c));
  }
  if (cpus.empty()) usage_error("--pin-threads needs at least one CPU");
  return cpus;
}

std::size_t parse_work(const std::string& v) {
  if (v == "empty") return 0;
  if (v.rfind("memcpy:", 0) == 0) return parse_count(v.c_str() + 7, "memcpy size");
  usage_error("bad --work '" + v + "': want empty or memcpy:BYTES");
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--site") {
      o.site = value();
    } else if (a == "--marker") {
      std::string v = value();
      if (v != "on" && v != "off") usage_error("--marker takes on or off");
      o.marker_on = v == "on";
    } else if (a == "--sigtrap-handler") {
      o.sigtrap_handler = true;
    } else if (a == "--iterations") {
      o.iterations = parse_count(value().c_str(), "iteration count");
    } else if (a == "--threads") {
      o.threads = static_cast<unsigned>(parse_count(value().c_str(), "thread count"));
    } else if (a == "--marker-capacity") {
      o.marker_capacity = parse_count(value().c_str(), "marker capacity");
    } else if (a == "--work") {
      o.work_bytes = parse_work(value());
    } else if (a == "--pin-threads") {
      o.pin_threads = parse_cpus(value());
    } else if (a == "--stop-before-loop") {
      o.stop_before_loop = true;
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  return o;
}

}  // namespace probecost::inferior
