#pragma once
// How a probe goes in (--via), a type from the option's parsing to every report that names it.
#include <string>

#include "common/names.hpp"

namespace probecost {

// An int3, a jump to a trampoline (no trap, no stop per hit), or Auto: a jump where the site
// allows one, an int3 elsewhere. A probe's report says Int3 or Jump.
enum class Via { Int3, Jump, Auto };
inline constexpr auto kViaNames =
    name_table<Via>({{Via::Int3, "int3"}, {Via::Jump, "jump"}, {Via::Auto, "auto"}});
// "int3", "jump" or "auto"; UsageError for anything else.
Via parse_via(const std::string& text);
const char* via_name(Via via);

}  // namespace probecost
