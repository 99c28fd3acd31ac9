#!/usr/bin/env bash
# Installs the Debian 12 packages probecost needs to build and test.
# Skips apt entirely when everything is already there (CI re-runs, developer machines).
set -euo pipefail
packages=(
  build-essential cmake pkg-config
  libunwind-dev libelf-dev libdw-dev
  libiberty-dev  # cplus_demangle: C++ probe names as c++filt and gdb demangle them
  libboost-program-options-dev
  googletest libgtest-dev
  libzydis-dev nlohmann-json3-dev
  rapidjson-dev  # probecost replay: record's Chrome JSON read by its SAX reader, as a stream
  clang-format
  chromium  # tests/cli/report_render.sh renders `probecost report` headless
  bpftrace  # scripts/uprobe-vs-bpftrace.sh: the kernel uprobe measured by bpftrace too
  babeltrace2  # record_ctf_tests: probecost record's CTF traces read back
  libseccomp-dev  # seccomp_tests: filters built by libseccomp for the seccomp evaluator
  clang libclang-rt-14-dev  # scripts/fuzz.sh: clang and its libFuzzer runtime
  asciidoctor  # docs/man/*.adoc rendered to man pages (-b manpage)
  systemtap-sdt-dev  # <sys/sdt.h>: the USDT markers of tests/targets/usdt_target.cpp
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
