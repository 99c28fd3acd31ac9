#pragma once
// What the subcommands share: option parsing, the inferior's path, output, progress.
#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "breakpoint/error.hpp"

namespace probecost::cli {

namespace po = boost::program_options;

// UsageError with a pointer to `probecost CMD --help` on any parse error.
po::variables_map parse(const std::vector<std::string>& args, const po::options_description& desc,
                        const std::string& cmd);
std::vector<double> parse_rates(const std::vector<std::string>& texts);
// {"a,b", "c"} -> {"a", "b", "c"}
std::vector<std::string> split_commas(const std::vector<std::string>& in);
// `path`, or probecost-inferior next to probecost; UsageError when it is not executable.
std::string find_inferior(std::string path);
// "[3/10] what" on one line of stderr, cleared at the end.
void progress_line(int done, int total, const std::string& what);

// Writes through -o FILE or to stdout.
template <typename F>
void emit(const std::string& file, F&& write) {
  if (file.empty() || file == "-") return write(std::cout);
  std::ofstream out(file);
  if (!out) throw Error::from_errno("cannot write " + file);
  write(out);
}

}  // namespace probecost::cli
