#!/usr/bin/env bash
# `probecost CMD --help` and docs/man/probecost-CMD.adoc name the same options: every long
# option of --help is a term of the page's OPTIONS, and every option the OPTIONS list is in
# --help; each short letter stands for the same long option in both. And every command of `probecost --help` has its page, listed in probecost(1).
# usage: help_matches_man.sh PROBECOST DOCS_MAN_DIR
set -euo pipefail
probecost=$1 man=$2
failed=0

# Long options of a --help: lines "  -p [ --pid ] arg ..." and "  --all-matches ...".
help_options() {
  "$probecost" "$@" --help | sed -n -E 's/^  (-[A-Za-z] \[ )?(--[a-z0-9-]+).*/\2/p' | sort -u
}

# Long options in the terms ("*-p*, *--pid*=_PID_::") of the page's OPTIONS section.
man_options() {
  sed -n '/^== OPTIONS/,/^== /p' "$1" | grep -E '::$' | grep -o -E -- '--[a-z0-9-]+' | sort -u
}

# Short letters with their long option, "-p --pid", from a --help and from a page's terms.
help_letters() {
  "$probecost" "$@" --help | sed -n -E 's/^  (-[A-Za-z]) \[ (--[a-z0-9-]+).*/\1 \2/p' | sort -u
}
man_letters() {
  sed -n '/^== OPTIONS/,/^== /p' "$1" | grep -E '::$' |
    sed -n -E 's/^\*(-[A-Za-z])\*, \*(--[a-z0-9-]+)\*.*/\1 \2/p' | sort -u
}

commands=$("$probecost" --help | sed -n '/^commands:/,/^$/p' | sed -n -E 's/^  ([a-z]+).*/\1/p')
[ -n "$commands" ] || { echo "no commands in 'probecost --help'"; exit 1; }
for cmd in $commands; do
  page=$man/probecost-$cmd.adoc
  if [ ! -f "$page" ]; then
    echo "probecost $cmd: no man page $page"
    failed=1
    continue
  fi
  if ! grep -q -F "*probecost-$cmd*(1)" "$man/probecost.adoc"; then
    echo "probecost(1) does not list probecost-$cmd(1)"
    failed=1
  fi
  args=("$cmd")
  [ "$cmd" = bench ] && args+=(step-over)
  help=$(help_options "${args[@]}")
  doc=$(man_options "$page")
  missing=$(comm -23 <(echo "$help") <(echo "$doc"))
  extra=$(comm -13 <(echo "$help") <(echo "$doc"))
  if [ -n "$missing" ]; then
    echo "probecost $cmd --help has options $page does not document:" $missing
    failed=1
  fi
  if [ -n "$extra" ]; then
    echo "$page documents options 'probecost $cmd --help' does not have:" $extra
    failed=1
  fi
  if [ "$(help_letters "${args[@]}")" != "$(man_letters "$page")" ]; then
    echo "probecost $cmd: the short options of --help and $page differ:"
    diff <(help_letters "${args[@]}") <(man_letters "$page") || true
    failed=1
  fi
  # Each default --help shows, "--via arg (=auto)", is in the page's entry for the option.
  while read -r opt default; do
    entry=$(awk -v o="$opt" '/^== OPTIONS/ { f = 1 } f && /::$/ { p = index($0, o "*") > 0; next }
                             /^== / && f > 1 { exit } f { f = 2 } p' "$page")
    if ! grep -q -F -- "$default" <<<"$entry"; then
      echo "probecost $cmd $opt: --help's default '$default' is not in $page"
      failed=1
    fi
  done < <("$probecost" "${args[@]}" --help |
    sed -n -E 's/^  (-[A-Za-z] \[ )?(--[a-z0-9-]+)( \])? arg \(=([^)]*)\).*/\2 \4/p')
  echo "probecost $cmd: $(echo "$help" | wc -l) options, the same in --help and $(basename "$page")"
done
# probecost(1)'s own options: those of `probecost --help` in its usage line and below.
for opt in --help --version; do
  man_options "$man/probecost.adoc" | grep -q -x -- "$opt" || {
    echo "probecost(1) does not document $opt"
    failed=1
  }
done
exit $failed
