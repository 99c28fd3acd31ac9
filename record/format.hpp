#pragma once
// The two formats a recording is written in (record/recorder.hpp) and read back from
// (replay/recording.hpp): one enum and its one name table for both.
#include "common/names.hpp"

namespace probecost::record {

enum class Format { chrome, ctf };
inline constexpr auto kFormatNames =
    name_table<Format>({{Format::chrome, "chrome"}, {Format::ctf, "ctf"}});

}  // namespace probecost::record
