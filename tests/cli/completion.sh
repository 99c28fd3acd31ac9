#!/usr/bin/env bash
# docs/completion/probecost.bash, sourced in bash and driven as bash drives it at a TAB:
# COMP_WORDS and COMP_CWORD set, _probecost called, COMPREPLY read.
# usage: completion.sh PROBECOST COMPLETION_FILE INFERIOR
set -uo pipefail
probecost=$1 completion=$2 inferior=$3
# shellcheck source=/dev/null
source "$completion"
failed=0

# expect "WANTED" CWORD WORD...: COMPREPLY, sorted and joined by spaces, is WANTED.
expect() {
  local wanted=$1 cword=$2
  shift 2
  COMP_WORDS=("$@")
  COMP_CWORD=$cword
  COMPREPLY=()
  _probecost
  local got
  got=$(printf '%s\n' "${COMPREPLY[@]}" | sort -u | tr '\n' ' ' | sed 's/ $//')
  if [ "$got" != "$wanted" ]; then
    echo "FAIL: '${COMP_WORDS[*]}' at word $cword: got '$got', wanted '$wanted'"
    failed=1
  else
    echo "ok: '${COMP_WORDS[*]}' at word $cword: $got"
  fi
}

[ "$(complete -p probecost)" = "complete -F _probecost probecost" ] || {
  echo "FAIL: not registered: $(complete -p probecost 2>&1)"
  failed=1
}
expect "record" 1 "$probecost" rec
expect "record replay report restore" 2 "$probecost" help re
expect "--report" 3 "$probecost" replay t.json --rep
expect "json text" 3 "$probecost" replay --format ""
expect "--summary-json" 2 "$probecost" record --su
expect "--via" 4 "$probecost" trace -p 1 --vi
expect "auto int3 jump" 3 "$probecost" trace --via ""
expect "--strict" 2 "$probecost" compare --stri
expect "int3-ptrace int3-ptrace-fast int3-signal" 3 "$probecost" compare -m int3
expect "step-over" 2 "$probecost" bench s
expect "--kinds" 3 "$probecost" bench step-over --ki
expect "multi-probe" 2 "$probecost" experiment mu
# -p: the PIDs in /proc; this shell's own among them.
expect "$(compgen -W "$(ls /proc | grep -E '^[0-9]+$')" -- "$$" | sort | tr '\n' ' ' | sed 's/ $//')" \
  3 "$probecost" trace -p "$$"
# -b: the functions of the program after --, wherever the cursor is.
expect "probecost_site_plain probecost_site_probe probecost_site_push" 3 \
  "$probecost" trace -b probecost_site_p -- "$inferior" --site probe
expect "probecost_site_nop5" 5 "$probecost" record -o x.json -b probecost_site_n -- "$inferior"
# After -- the words are the command's own.
expect "$(compgen -c -- ech | sort -u | tr '\n' ' ' | sed 's/ $//')" 3 \
  "$probecost" trace -- ech
exit $failed
