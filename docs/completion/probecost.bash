# bash completion for probecost: commands, each command's options (read from its --help at
# completion time, so that they never drift from the program), option values, PIDs for -p, and
# for -b the function symbols of the target (the program after --, or /proc/PID/exe), by nm.
# Installed as share/bash-completion/completions/probecost; or source it.

# The long and short options of `probecost CMD`, one a line: "-p --pid arg", "--all-matches".
_probecost_help_options() {
  local probecost=$1 cmd=$2
  local -a args=("$cmd")
  [[ $cmd == bench ]] && args+=(step-over)
  "$probecost" "${args[@]}" --help 2>/dev/null |
    sed -n -E 's/^  (-([A-Za-z]) \[ )?--([a-z0-9-]+)( \])?( arg)?.*/\2 --\3 \5/p' |
    sed -E 's/^([A-Za-z]) /-\1 /; s/^ //'
}

# What `probecost compare --help` lists after "mechanisms:".
_probecost_mechanisms() {
  "$1" compare --help 2>/dev/null | sed -n '/^mechanisms:/,/^$/p' | sed '1s/^mechanisms://' |
    tr ',' ' '
}

# The function symbols of a program, for -b: its own and its dynamic ones (nm -D), if nm is
# there; nothing otherwise.
_probecost_symbols() {
  local exe=$1
  [[ -r $exe ]] && command -v nm >/dev/null 2>&1 || return 0
  { nm --defined-only "$exe" 2>/dev/null; nm -D --defined-only "$exe" 2>/dev/null; } |
    awk '$2 ~ /^[TtWwi]$/ { print $3 }' | sort -u
}

# The target of the command line being completed: the program after --, or -p PID's executable.
_probecost_target() {
  local i w pid=
  for ((i = 2; i < ${#COMP_WORDS[@]}; i++)); do
    w=${COMP_WORDS[i]}
    if [[ $w == -- ]]; then
      w=${COMP_WORDS[i + 1]}
      [[ -n $w ]] && type -P -- "$w" && return 0
      return 0
    fi
    [[ $w == -p || $w == --pid ]] && pid=${COMP_WORDS[i + 1]}
    [[ $w == --pid=* ]] && pid=${w#--pid=}
  done
  pid=${pid%%,*}
  [[ -n $pid ]] && echo "/proc/$pid/exe"
}

_probecost() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
  local probecost=${COMP_WORDS[0]} cmd= i
  local commands="trace record replay compare overhead experiment report restore bench help"
  COMPREPLY=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ ${COMP_WORDS[i]} != -* ]]; then
      cmd=${COMP_WORDS[i]}
      break
    fi
  done
  if [[ -z $cmd ]]; then
    COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur"))
    return 0
  fi
  # After "--" the words are the command's: a program, then files.
  for ((i = 2; i < COMP_CWORD; i++)); do
    if [[ ${COMP_WORDS[i]} == -- ]]; then
      if ((COMP_CWORD == i + 1)); then
        COMPREPLY=($(compgen -c -- "$cur"))
      else
        COMPREPLY=($(compgen -f -- "$cur"))
      fi
      return 0
    fi
  done
  case $cmd in
    help)
      ((COMP_CWORD == 2)) && COMPREPLY=($(compgen -W "$commands" -- "$cur"))
      return 0
      ;;
    bench)
      if ((COMP_CWORD == 2)); then
        COMPREPLY=($(compgen -W "step-over" -- "$cur"))
        return 0
      fi
      ;;
    replay)
      # PATH: a recording, a file or a CTF directory; wherever no option wants a value.
      if [[ $cur != -* ]] && ! [[ $prev =~ ^(-t|--tid|-F|--function|-r|--time-range|-D|--depth|-f|--format)$ ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        return 0
      fi
      ;;
    experiment)
      if [[ $cur != -* && $prev != -* ]]; then
        COMPREPLY=($(compgen -W "markers scalability multi-probe int3-vs-marker all" -- "$cur"))
        return 0
      fi
      ;;
  esac

  local options
  options=$(_probecost_help_options "$probecost" "$cmd")
  # The option before the cursor takes a value: complete the value.
  if [[ $prev == -* ]] && grep -q -E -- "(^| )$prev( .*)? arg$" <<<"$options"; then
    local long
    long=$(grep -E -- "(^| )$prev( |$)" <<<"$options" | grep -o -E -- '--[a-z0-9-]+')
    case $long in
      --pid)
        COMPREPLY=($(compgen -W "$(command ls /proc 2>/dev/null | grep -E '^[0-9]+$')" -- "$cur"))
        ;;
      --probe)
        local target
        target=$(_probecost_target)
        [[ -n $target ]] && COMPREPLY=($(compgen -W "$(_probecost_symbols "$target")" -- "$cur"))
        ;;
      --via) COMPREPLY=($(compgen -W "auto jump int3" -- "$cur")) ;;
      --step-over) COMPREPLY=($(compgen -W "auto singlestep emulate outline" -- "$cur")) ;;
      --placement) COMPREPLY=($(compgen -W "same-cpu split free follow spread" -- "$cur")) ;;
      --format)
        if [[ $cmd == record ]]; then
          COMPREPLY=($(compgen -W "chrome ctf" -- "$cur"))
        elif [[ $cmd == replay ]]; then
          COMPREPLY=($(compgen -W "text json" -- "$cur"))
        else
          COMPREPLY=($(compgen -W "text json csv" -- "$cur"))
        fi
        ;;
      --mechanisms)
        COMPREPLY=($(compgen -W "$(_probecost_mechanisms "$probecost")" -- "$cur"))
        ;;
      --output | --folded | --summary-json | --calibration | --json | --from | --stdin | --inferior)
        COMPREPLY=($(compgen -f -- "$cur"))
        ;;
    esac
    return 0
  fi
  COMPREPLY=($(compgen -W "$(tr ' ' '\n' <<<"$options" | grep -E '^-' | sort -u)" -- "$cur"))
  return 0
}

complete -F _probecost probecost
