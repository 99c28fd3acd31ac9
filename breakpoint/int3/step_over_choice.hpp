#pragma once
// The step-over strategies by name, from --step-over to every report that names one: small
// enough for the floors above (whatever names a strategy in a report) to include without the
// strategies themselves (step_over.hpp).
#include "common/names.hpp"

namespace probecost {

// The strategies a user can ask for (--step-over).
enum class StepOverChoice { SingleStep, Emulate, Outline, Auto };
inline constexpr auto kStepOverNames = name_table<StepOverChoice>({
    {StepOverChoice::SingleStep, "singlestep"},
    {StepOverChoice::Emulate, "emulate"},
    {StepOverChoice::Outline, "outline"},
    {StepOverChoice::Auto, "auto"},
});
inline const char* step_over_name(StepOverChoice choice) {
  return kStepOverNames.name(choice);
}

// How one site is stepped over, chosen per site within the choice: a describe() of the site
// starts with its name.
enum class StepMethod { Emulate, Outline, SingleStep };
inline constexpr auto kStepMethodNames = name_table<StepMethod>({
    {StepMethod::Emulate, "emulate"},
    {StepMethod::Outline, "outline"},
    {StepMethod::SingleStep, "singlestep"},
});

}  // namespace probecost
