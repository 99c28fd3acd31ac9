#pragma once
// CannotProbe: a probe the user named cannot go into this process. It names nothing there (no
// such symbol, module or USDT probe), several things, or a place no probe may go (not mapped,
// not executable, inside an instruction, a USDT site that is no nop), or --via jump asks a jump
// where none fits. The engine says which and why; the command line decides what a user sees
// (cli/main.cpp: exit code 2, as for bad input). A malformed spec is a UsageError of its parser.
#include "common/error.hpp"

namespace probecost {

class CannotProbe : public Error {
 public:
  using Error::Error;
};

}  // namespace probecost
