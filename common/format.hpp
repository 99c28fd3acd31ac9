#pragma once
// How the reports print: one set of formatters for compare, overhead, the experiments and the
// HTML report, in text, CSV and JSON.
//
// Text: every number of 1,000 or more groups its thousands with commas ("5,000,000",
// "32,028.9"); a figure that rounds to zero prints unsigned ("0.0", never "-0.0").
// CSV and JSON: fixed notation, never scientific, with the shortest digits that read back as the
// same double ("1200000", "0.000000000000001776"); JSON numbers stay numbers.
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "common/names.hpp"

namespace probecost {

// A report's format, as -f names it.
enum class Format { Text, Json, Csv };
inline constexpr auto kFormatNames =
    name_table<Format>({{Format::Text, "text"}, {Format::Json, "json"}, {Format::Csv, "csv"}});
// "text", "json" or "csv"; UsageError otherwise.
Format parse_format(const std::string& text);
// The same for a command that writes only the `allowed` formats: "bad format 'csv' (text or
// json)".
Format parse_format(const std::string& text, std::initializer_list<Format> allowed);

// `v` with `decimals` decimals, thousands grouped: num(32028.94, 1) = "32,028.9",
// num(-0.04, 1) = "0.0". Not finite: "inf", "-inf", "nan".
std::string num(double v, int decimals);
// The same with a sign always: "+1.2", "-0.3", "+0.0" (never "-0.0").
std::string signed_num(double v, int decimals);
// num(v, 0): "1,234,567".
std::string group_thousands(double v);
// A share of a CPU: one decimal from 10% up ("2,325.0%", "150.7%", "16.5%"), two below
// ("0.60%").
std::string percent(double p);
// A ratio (x the marker): two decimals under 100 ("1.00", "42.37"), whole above ("3,988").
std::string times(double ratio);
// A time in the unit that reads best, to 3 significant digits: "8.03 ns", "999 ns", "2.42 µs",
// "32.0 µs", "1.50 ms", "2.00 s".
std::string human_ns(double ns);

// `s` with spaces to `width` characters (a UTF-8 sequence counts as one character): in front
// (right-aligned), or behind with `left`.
std::string pad(const std::string& s, std::size_t width, bool left = false);

// One number for CSV: fixed notation, shortest round trip, "0" for -0; "inf", "-inf", "nan".
std::string plain_number(double v);
// j.dump(indent), every writer's one way to text: a string that is not UTF-8 (a symbol, a path or
// a thread name is whatever bytes the program chose) has each bad byte replaced by U+FFFD, where
// nlohmann's own dump() throws type_error.316 and the whole report would be lost.
std::string json_text(const nlohmann::json& j, int indent = -1);
// json_text with every floating-point number in fixed notation (plain_number); -0 is 0.
std::string json_dump(const nlohmann::json& j, int indent = 2);

}  // namespace probecost
