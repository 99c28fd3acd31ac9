#include "known.hpp"

namespace torture {

namespace {

bool is(const Case& c, const char* program) {
  return c.subject->program->name == program;
}

bool via_jump(const Case& c) {
  return c.way->name == "jump" || c.way->name == "auto";
}

bool function_is(const Case& c, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (c.function->name == n) return true;
  }
  return false;
}

}  // namespace

int known_item(const Case& c, const std::string& why) {
  // 1: every boundary at once: a second site a few bytes after one that took a jump is decoded
  // from the jump's bytes, and its int3 lands in the jump's displacement.
  if (c.all_at_once && via_jump(c)) return 1;
  // 2: the unwinder enters a C++ landing pad that a jump covered (-O0: pads inside the body).
  if (is(c, "cxx_O0") && via_jump(c)) return 2;
  // 3: a RIP saved in a parked handler's signal frame inside the patched bytes.
  if (is(c, "parked") && via_jump(c)) return 3;
  // 4: a fault in a relocated copy reached the handler with the copy's address.
  bool copies = c.way->name == "int3/outline" || c.way->name == "int3/auto" || via_jump(c);
  if ((is(c, "safefetch") || is(c, "parked")) && copies) return 4;
  // 5: a jump at an entry assumed the caller's status flags dead.
  if (is(c, "asm") && via_jump(c) && function_is(c, {"t_flags_entry", "t_of_entry"})) return 5;
  // 7: mmap(PROT_EXEC) refused with EPERM (PR_SET_MDWE): no fallback to what still works.
  if (is(c, "c_mdwe") && why.find("no report") != std::string::npos) return 7;
  return 0;
}

std::string known_description(int item) {
  switch (item) {
    case 1:
      return "item 1 (a probe inside another probe's jump: all boundaries at once)";
    case 2:
      return "item 2 (a jump over a C++ landing pad)";
    case 3:
      return "item 3 (a jump over the RIP of a parked signal frame)";
    case 4:
      return "item 4 (a fault in a relocated copy, seen at the copy's address)";
    case 5:
      return "item 5 (a jump at an entry where the caller's flags are live)";
    case 7:
      return "item 7 (mmap(PROT_EXEC) refused: no fallback)";
  }
  return "issue 15 item " + std::to_string(item);
}

}  // namespace torture
