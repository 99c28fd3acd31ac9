#pragma once
// The failures issue 15 lists as broken on main before its fixes (items 1, 2, 3, 5 and 7; item 4
// too, but its fix came with the suite), recognised by where they happen, so that a run against
// such a probecost (torture_suite --main --probecost PATH) lists them apart and fails only on
// anything else.
#include <string>

#include "suite.hpp"

namespace torture {

// The issue-15 item a failure of this case is, or 0 when it is none of them.
int known_item(const Case& c, const std::string& why);
// One line about an item.
std::string known_description(int item);

}  // namespace torture
