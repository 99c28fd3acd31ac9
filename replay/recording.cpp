#include "replay/recording.hpp"

#include <sys/stat.h>

#include <cstring>

#include "common/error.hpp"

namespace probecost::replay {

TraceFormat recording_format(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw UsageError("cannot read the recording " + path + ": " + std::strerror(errno));
  return S_ISDIR(st.st_mode) ? TraceFormat::ctf : TraceFormat::chrome;
}

void read_recording(const std::string& path, Sink& sink) {
  if (recording_format(path) == TraceFormat::ctf)
    read_ctf(path, sink);
  else
    read_chrome(path, sink);
}

}  // namespace probecost::replay
