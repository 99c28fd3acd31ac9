#pragma once
// The two formats a recording is written in (record/recorder.hpp) and read back from
// (replay/recording.hpp): one enum and its one name table for both.
#include "common/names.hpp"

namespace probecost::record {

enum class TraceFormat { chrome, ctf };
inline constexpr auto kTraceFormatNames =
    name_table<TraceFormat>({{TraceFormat::chrome, "chrome"}, {TraceFormat::ctf, "ctf"}});

}  // namespace probecost::record
