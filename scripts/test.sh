#!/usr/bin/env bash
# Builds probecost twice and runs the whole test suite on both builds:
#   build-release: Release, -Wall -Wextra -Werror
#   build-asan:    Debug with AddressSanitizer + UndefinedBehaviorSanitizer
# then runs each libFuzzer target for a short time (scripts/fuzz.sh, clang).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Each phase prints its wall time, so a CI log shows where its budget goes.
phase_start=$SECONDS
took() { echo "== $1 took $((SECONDS - phase_start)) s (total $SECONDS s)"; phase_start=$SECONDS; }
echo "== clang-format"
git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run --Werror
took clang-format
for flavour in release asan; do
  dir="build-$flavour"
  if [ "$flavour" = release ]; then
    opts=(-DCMAKE_BUILD_TYPE=Release -DPROBECOST_WERROR=ON)
  else
    opts=(-DCMAKE_BUILD_TYPE=Debug -DPROBECOST_WERROR=ON -DPROBECOST_SANITIZE=ON)
  fi
  echo "== $flavour build"
  cmake -S . -B "$dir" "${opts[@]}" >/dev/null
  cmake --build "$dir" -j "$jobs"
  took "$flavour build"
  echo "== $flavour tests"
  # The release run's measured times order the ASan run (costliest first: the long tests then
  # overlap the many short ones instead of running alone at the end); CMake's COST hints order
  # the first run of a fresh build directory.
  costs=Testing/Temporary/CTestCostData.txt
  if [ "$flavour" = asan ] && [ -f "build-release/$costs" ] && [ ! -f "$dir/$costs" ]; then
    mkdir -p "$dir/Testing/Temporary" && cp "build-release/$costs" "$dir/$costs"
  fi
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
  took "$flavour tests"
done
echo "== fuzzing"
./scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
took fuzzing
