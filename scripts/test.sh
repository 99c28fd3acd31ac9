#!/usr/bin/env bash
# Builds probecost twice and runs the whole test suite on both builds:
#   build-release: Release, -Wall -Wextra -Werror
#   build-asan:    Debug with AddressSanitizer + UndefinedBehaviorSanitizer
# then runs each libFuzzer target for a short time (scripts/fuzz.sh, clang).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
echo "== clang-format"
git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run --Werror
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
  echo "== $flavour tests"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
done
echo "== fuzzing"
./scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
