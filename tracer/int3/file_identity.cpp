// file_identity (file_identity.hpp), apart from the trap areas' reading: probecost-guard needs it
// and none of the decoder that reading pulls in.
#include "tracer/int3/file_identity.hpp"

#include <sys/sysmacros.h>

#include <cstdio>

namespace probecost {

trap::FileIdentity file_identity(const Mapping& m, RuntimeAddr at) {
  unsigned major = 0, minor = 0;
  unsigned long long inode = 0;
  std::sscanf(m.file_id.c_str(), "%x:%x:%llu", &major, &minor, &inode);
  if (inode == 0) return {};
  return {makedev(major, minor), inode, m.offset + static_cast<std::uint64_t>(at - m.start)};
}

}  // namespace probecost
