#pragma once
// The user's own results on the report's page, beside the seeds' experiments: what
// `probecost compare -f json` and `probecost overhead -f json` wrote, read as the documents
// they are (their fields as the README lists them), so that a result of an older or newer
// probecost draws as far as it has the fields.
#include <nlohmann/json.hpp>
#include <string>

namespace probecost {

enum class JsonKind { Experiment, Experiments, Compare, Overhead, Unknown };

// What a JSON document written by probecost is.
JsonKind json_kind(const nlohmann::json& j);

struct UserResult {
  std::string source;  // the file it was read from
  JsonKind kind = JsonKind::Unknown;
  nlohmann::json doc;
};

// The result's section of the page: its charts (ids made unique with `index`) and tables.
// nlohmann::json::exception when a field it needs is missing or of the wrong type.
std::string user_result_section(const UserResult& r, std::size_t index);

}  // namespace probecost
