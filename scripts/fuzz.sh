#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz and runs each for a short
# time, starting from its corpus in tests/fuzz/corpus/<target>/ (read only: new inputs go to
# a scratch directory). Prints the executions of each; exits non-zero on any crash, leak,
# timeout or sanitizer report, leaving the input in build-fuzz/artifacts/.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 20; FUZZ_SECONDS works too)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${FUZZ_SECONDS:-20}}
targets=(fuzz_probe_spec fuzz_units fuzz_maps fuzz_elf_symbols)
echo "== fuzz build (clang)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DPROBECOST_FUZZ=ON -DBUILD_TESTING=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"
artifacts=build-fuzz/artifacts
mkdir -p "$artifacts"
failed=0
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  log="build-fuzz/$t.log"
  echo "== $t: ${seconds} s"
  if ! "build-fuzz/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/$t-" "$scratch" \
      "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    failed=1
    echo "$t: FAILED (crash input in $artifacts/, log in $log)"
    grep -E "ERROR|SUMMARY|Test unit written" "$log" | head -5 || true
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "$t: ${runs:-?} executions, corpus $(ls "$scratch" | wc -l) new inputs"
  rm -rf "$scratch"
done
exit $failed
