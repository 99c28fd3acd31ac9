#include "cli/parse.hpp"

#include <cerrno>
#include <cstdlib>

#include "common/error.hpp"

namespace po = boost::program_options;

namespace probecost::cli {

po::variables_map parse_options(const std::vector<std::string>& args,
                                const po::options_description& desc, const std::string& cmd) {
  // Bare words are collected by a hidden positional option, to be named in the error: none of
  // the commands takes one.
  po::options_description hidden;
  hidden.add_options()("stray-argument", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(desc).add(hidden);
  po::positional_options_description positional;
  positional.add("stray-argument", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see 'probecost " + cmd + " --help')");
  }
  if (vm.count("stray-argument")) {
    throw UsageError(
        "unexpected argument '" + vm["stray-argument"].as<std::vector<std::string>>().front() +
        "': every argument is an option or an option's value (see 'probecost " + cmd + " --help')");
  }
  return vm;
}

std::uint64_t parse_count(const std::string& option, const std::string& text, std::uint64_t min,
                          std::uint64_t max) {
  auto bad = [&] {
    std::string range = max >= UINT32_MAX
                            ? ">= " + std::to_string(min)
                            : "from " + std::to_string(min) + " to " + std::to_string(max);
    return UsageError("bad " + option + " '" + text + "': want a whole number " + range);
  };
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) throw bad();
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v < min || v > max) throw bad();
  return v;
}

}  // namespace probecost::cli
