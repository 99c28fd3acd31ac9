#pragma once
// probecost's cache directory ($XDG_CACHE_HOME/probecost, else ~/.cache/probecost) and writing
// a file there so that a reader never sees half of it.
#include <string>
#include <string_view>

namespace probecost {

// $XDG_CACHE_HOME/probecost (an absolute XDG_CACHE_HOME), else $HOME/.cache/probecost; empty
// when neither is set.
std::string cache_dir();

// Writes `bytes` to a temporary file beside `path` and renames it over `path`, creating the
// directory (and its parent) if needed. Empty on success, else why not.
std::string write_atomically(const std::string& path, std::string_view bytes);

}  // namespace probecost
