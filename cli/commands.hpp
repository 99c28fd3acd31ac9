#pragma once
#include <string>
#include <vector>

namespace probecost::cli {

// Each returns the process exit code; bad usage throws UsageError (exit 2).
int compare_command(const std::vector<std::string>& args);
int overhead_command(const std::vector<std::string>& args);
int bench_command(const std::vector<std::string>& args);
int trace_command(const std::vector<std::string>& args);
int restore_command(const std::vector<std::string>& args);

// PATH when given and executable; else probecost-inferior next to probecost. UsageError when
// it is missing.
std::string find_inferior(std::string path);

}  // namespace probecost::cli
