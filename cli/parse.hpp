#pragma once
// Option parsing shared by the subcommands.
#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace probecost::cli {

// Parses `args` against `desc`. Every token must be an option or an option's value: a stray
// positional argument is a UsageError, as is an unknown option.
boost::program_options::variables_map parse_options(
    const std::vector<std::string>& args, const boost::program_options::options_description& desc,
    const std::string& cmd);

// A whole decimal number >= `min` (and <= `max`), as typed: "-1", "1.5", "" and "7x" are
// UsageErrors naming the option. (Boost's unsigned parsing would turn "-1" into 4294967295.)
std::uint64_t parse_count(const std::string& option, const std::string& text, std::uint64_t min,
                          std::uint64_t max = UINT32_MAX);

}  // namespace probecost::cli
