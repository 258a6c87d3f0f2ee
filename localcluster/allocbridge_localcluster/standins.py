"""Stand-ins for `kill`, `pkill`, `killall`, `cat` and the power commands, as POSIX sh scripts.

kwok runs every `kubectl exec` command as a plain process on this machine, so a test or the
operator sending `["kill", "-TERM", "1"]` into a pod must not reach the machine's PID 1. kwok and
every exec'd command get a PATH that starts with the stand-in folder, so the bare names resolve
here. The scripts only record and answer; nothing is ever signalled. Only a bare name resolved
through PATH reaches them: `/bin/kill ...` or the shell builtin in `sh -c "kill ..."` make a
real kill(2), which is neither recorded nor seen by the kubelet simulation (and, run as the
unprivileged sandbox user, cannot touch the machine's processes).

Contract (the rules in `kubelet.py`, the simulation in `sandbox.py` and the tests rely on it):

* The sandbox of a container is the folder in `$ALLOCBRIDGE_SANDBOX` (also the exec's cwd).
  Without it the stand-ins refuse (exit 2) rather than guess.
* `kill` parses `kill [-s SIG | --signal SIG | -SIG | -n N | -q VALUE] [--] PID...`,
  `kill -l [SIG]` and `kill -L` as procps kill does: names are case-insensitive with or without
  `SIG`, numbers 0-64, `RTMIN+n`/`RTMAX-n`; the default is TERM. A `-N` before any signal is a
  signal number; after it, a negative PID. An unknown signal gives `kill: unknown signal name X`,
  exit 1 and no record; a PID that is not an integer gives `kill: failed to parse argument: 'X'`.
* Every well-formed `kill` appends one JSON line to `$ALLOCBRIDGE_SANDBOX/signals.log`:
  `{"time": RFC 3339 UTC, "command": "kill", "signal": "TERM", "number": 15,
  "pids": [1], "argv": ["kill", "-TERM", "1"]}`.
* After appending, a byte is appended to `$ALLOCBRIDGE_ACTIVITY` (if set), which wakes the
  kubelet simulation's poller at once.
* PIDs 1 (the container's main process), 0 (own process group) and -1 (every process) exist;
  any other PID is answered `kill: (PID): No such process` and the exit status is 1 (the
  existing ones are still recorded, as procps does).
* PID 1 follows Linux's rules for a namespace's init (see `allocbridge.model.pid1`). By default
  the container runs its main process under an init like tini: PID 1 blocks (and forwards to the
  main process) every signal except KILL and STOP, which the kernel drops; `kill -1` reaches the
  main process directly. With a file `$ALLOCBRIDGE_SANDBOX/no-init`, the main process is PID 1
  itself with nothing below it: only the signals named in `handles` reach it (and, handled, do
  not end it); everything else, and anything sent to -1, reaches nothing.
* With an init, STOP to -1 creates `$ALLOCBRIDGE_SANDBOX/stopped`, and TSTP, TTIN or TTOU to 1
  or -1 do unless named in `handles`; CONT removes it. The marker changes before the record is
  appended. Without an init nothing ever creates it.
* `cat` plays the container's `/proc/1`: `/proc/1/status` (Name, State, SigBlk, SigIgn, SigCgt
  as above) and `/proc/1/task/1/children` are made up from the sandbox, any other `/proc/1/...`
  does not exist, and every other argument goes to the machine's `cat` (the stand-in folder is
  taken out of PATH first). So the operator's probe never reads the machine's PID 1.
* Behind the stand-ins, `guard/` holds a script of every name that refuses (exit 126, saying
  which stand-in is missing) and does nothing else. `search_path` puts it right after the
  stand-ins, so if a stand-in ever goes missing its name still never reaches the machine's
  command of that name.
* `pkill` and `killall` record a line with `"pids": []` and answer as if nothing matched (exit 1;
  killall prints `NAME: no process found`). `reboot`, `shutdown`, `halt` and `poweroff` record a
  line with `"signal": null` and exit 0 after saying nothing was done.
"""

from __future__ import annotations

import os
from pathlib import Path

NAMES = ("kill", "pkill", "killall", "cat", "reboot", "shutdown", "halt", "poweroff")
SIGNALS_LOG = "signals.log"
HANDLES_FILE = "handles"
STOPPED_FILE = "stopped"
EXIT_FILE = "exit"
NO_INIT_FILE = "no-init"
GUARD_FOLDER = "guard"

# Shared by all scripts: header, sandbox check, signal table; then JSON encoding and recording.
_HEAD = r"""#!/bin/sh
# allocbridge local-cluster stand-in: records what would have happened; never acts.
LC_ALL=C
export LC_ALL
set -f
me=@NAME@
"""

_SANDBOX = r"""
sandbox=${ALLOCBRIDGE_SANDBOX:-}
if [ -z "$sandbox" ] || [ ! -d "$sandbox" ]; then
  echo "$me: allocbridge sandbox stand-in: ALLOCBRIDGE_SANDBOX is not a folder;" \
    "nothing was done" >&2
  exit 2
fi
"""

_SIGNAL_TABLE = r"""
SIGNAMES="HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT"
SIGNAMES="$SIGNAMES CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH POLL PWR SYS"

# strip_zeros N: N without leading zeros (so $(( )) never reads octal).
strip_zeros() {
  z=$1
  while :; do
    case $z in
      0?*) z=${z#0} ;;
      *) break ;;
    esac
  done
  printf '%s' "$z"
}

# num_name N: the signal name of number N (0-64), or nothing.
num_name() {
  i=1
  for s in $SIGNAMES; do
    if [ "$i" -eq "$1" ]; then printf '%s' "$s"; return; fi
    i=$((i + 1))
  done
  if [ "$1" -eq 0 ] || [ "$1" -eq 32 ] || [ "$1" -eq 33 ]; then printf '%s' "$1"
  elif [ "$1" -eq 34 ]; then printf 'RTMIN'
  elif [ "$1" -lt 50 ]; then printf 'RTMIN+%s' $(($1 - 34))
  elif [ "$1" -lt 64 ]; then printf 'RTMAX-%s' $((64 - $1))
  elif [ "$1" -eq 64 ]; then printf 'RTMAX'
  fi
}

# resolve SPEC: sets sig_name and sig_num from a name or number; fails for unknown signals.
resolve() {
  r=$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')
  r=${r#SIG}
  case $r in
    '') return 1 ;;
    *[!0-9]*) ;;
    *)
      r=$(strip_zeros "$r")
      [ ${#r} -le 2 ] && [ "$r" -le 64 ] || return 1
      sig_num=$r
      sig_name=$(num_name "$r")
      return 0
      ;;
  esac
  case $r in
    IOT) r=ABRT ;;
    CLD) r=CHLD ;;
    IO) r=POLL ;;
  esac
  i=1
  for s in $SIGNAMES; do
    if [ "$s" = "$r" ]; then sig_name=$s; sig_num=$i; return 0; fi
    i=$((i + 1))
  done
  case $r in
    RTMIN) sig_num=34 ;;
    RTMAX) sig_num=64 ;;
    RTMIN+*) o=${r#RTMIN+}; case $o in ''|*[!0-9]*) return 1 ;; esac
      o=$(strip_zeros "$o"); [ ${#o} -le 2 ] && [ "$o" -le 30 ] || return 1
      sig_num=$((34 + o)) ;;
    RTMAX-*) o=${r#RTMAX-}; case $o in ''|*[!0-9]*) return 1 ;; esac
      o=$(strip_zeros "$o"); [ ${#o} -le 2 ] && [ "$o" -le 30 ] || return 1
      sig_num=$((64 - o)) ;;
    *) return 1 ;;
  esac
  sig_name=$(num_name "$sig_num")
}

# handled NAME: the main process traps NAME (it is listed in $sandbox/handles).
handled() {
  [ -f "$sandbox/handles" ] || return 1
  for h in $(tr '[:lower:],;' '[:upper:]  ' < "$sandbox/handles"); do
    h=${h#SIG}
    if [ "$h" = "$1" ] || [ "$h" = "$2" ]; then return 0; fi
  done
  return 1
}

# no_init: the main process is PID 1 itself (see the module's docstring).
no_init() {
  [ -f "$sandbox/no-init" ]
}
"""

_RECORDING = r"""
# json_strings ARG...: a JSON array of the arguments.
json_strings() {
  awk 'BEGIN {
    for (c = 1; c < 32; c++) ord[sprintf("%c", c)] = c
    out = "["
    for (i = 2; i < ARGC; i++) {
      s = ARGV[i]; e = ""
      for (j = 1; j <= length(s); j++) {
        ch = substr(s, j, 1)
        if (ch == "\\") e = e "\\\\"
        else if (ch == "\"") e = e "\\\""
        else if (ch in ord) e = e sprintf("\\u%04x", ord[ch])
        else e = e ch
      }
      out = out (i > 2 ? ", " : "") "\"" e "\""
    }
    print out "]"
  }' - "$@"
}

# record SIGNAL_JSON NUMBER_JSON PIDS_JSON: append one line to signals.log.
record() {
  t=$(date -u +%Y-%m-%dT%H:%M:%S.%NZ 2>/dev/null)
  case $t in *N*|'') t=$(date -u +%Y-%m-%dT%H:%M:%SZ) ;; esac
  line="{\"time\": \"$t\", \"command\": \"$me\", \"signal\": $1, \"number\": $2,"
  line="$line \"pids\": $3, \"argv\": $argv_json}"
  printf '%s\n' "$line" >> "$sandbox/signals.log"
  if [ -n "${ALLOCBRIDGE_ACTIVITY:-}" ]; then
    { printf . >> "$ALLOCBRIDGE_ACTIVITY"; } 2>/dev/null
  fi
}

argv_json=$(json_strings "$me" "$@")
"""

_KILL = r"""
usage() {
  cat >&2 <<'EOF'

Usage:
 kill [options] <pid> [...]

Options:
 <pid> [...]            send signal to every <pid> listed
 -<signal>, -s, --signal <signal>
                        specify the <signal> to be sent
 -n <number>            specify the signal by number
 -q, --queue <value>    integer value to be sent with the signal
 -l, --list=[<signal>]  list all signal names, or convert one to a name
 -L, --table            list all signal names in a nice table

 (allocbridge sandbox stand-in: records the request, signals nothing)
EOF
  exit 1
}

list_names() {
  i=0
  out=""
  for s in $SIGNAMES; do
    i=$((i + 1))
    out="$out$s"
    if [ $((i % 16)) -eq 0 ]; then out="$out
"; else out="$out "; fi
  done
  printf '%s\n' "${out% }"
}

table() {
  i=0
  for s in $SIGNAMES; do
    i=$((i + 1))
    printf '%2d %-8s' "$i" "$s"
    if [ $((i % 7)) -eq 0 ]; then printf '\n'; fi
  done
  printf '\n'
}

unknown() {
  echo "kill: unknown signal name $1" >&2
  exit 1
}

bad_arg() {
  echo "kill: failed to parse argument: '$1'" >&2
  exit 1
}

sig_name=TERM
sig_num=15
have_sig=0
mode=send
list_arg=""
pids=""
endopts=0
while [ $# -gt 0 ]; do
  a=$1
  shift
  if [ $endopts -eq 1 ] || [ -n "$pids" ]; then
    if [ "$a" = -- ] && [ $endopts -eq 0 ]; then endopts=1; continue; fi
    case $a in
      -[0-9]*|[0-9]*) p=${a#-}; case $p in *[!0-9]*) bad_arg "$a" ;; esac ;;
      *) bad_arg "$a" ;;
    esac
    pids="$pids $a"
    continue
  fi
  case $a in
    --) endopts=1 ;;
    -l|--list) mode=list; if [ $# -gt 0 ]; then list_arg=$1; shift; fi ;;
    --list=*) mode=list; list_arg=${a#--list=} ;;
    -L|--table) mode=table ;;
    -s|--signal|-n)
      [ $# -gt 0 ] || usage
      resolve "$1" || unknown "$1"
      have_sig=1
      shift ;;
    --signal=*) resolve "${a#--signal=}" || unknown "${a#--signal=}"; have_sig=1 ;;
    -q|--queue) [ $# -gt 0 ] || usage; shift ;;
    -h|--help) usage ;;
    -V|--version) echo "kill (allocbridge sandbox stand-in for procps-ng kill)"; exit 0 ;;
    -[0-9]*)
      if [ $have_sig -eq 0 ]; then
        resolve "${a#-}" || unknown "${a#-}"
        have_sig=1
      else
        p=${a#-}; case $p in *[!0-9]*) bad_arg "$a" ;; esac
        pids="$pids $a"
      fi ;;
    -?*) resolve "${a#-}" || unknown "${a#-}"; have_sig=1 ;;
    *[!0-9]*|'') bad_arg "$a" ;;
    *) pids="$pids $a" ;;
  esac
done

case $mode in
  table) table; exit 0 ;;
  list)
    if [ -z "$list_arg" ]; then list_names; exit 0; fi
    resolve "$list_arg" || unknown "$list_arg"
    case $list_arg in
      *[!0-9]*) echo "$sig_num" ;;
      *) echo "$sig_name" ;;
    esac
    exit 0 ;;
esac
[ -n "$pids" ] || usage

to_init=0
to_all=0
json_pids=""
for p in $pids; do
  n=${p#-}
  n=$(strip_zeros "$n")
  case $p in -*) n="-$n" ;; esac
  json_pids="$json_pids${json_pids:+, }$n"
  if [ "$n" = 1 ]; then to_init=1; fi
  if [ "$n" = -1 ]; then to_all=1; fi
done
if no_init; then
  # PID 1 alone: STOP is dropped, TSTP and friends are dropped or handled; CONT still resumes.
  if [ $to_init -eq 1 ] && [ "$sig_name" = CONT ]; then rm -f "$sandbox/stopped"; fi
elif [ $to_init -eq 1 ] || [ $to_all -eq 1 ]; then
  case $sig_name in
    STOP) if [ $to_all -eq 1 ]; then : > "$sandbox/stopped"; fi ;;
    TSTP|TTIN|TTOU) handled "$sig_name" "$sig_num" || : > "$sandbox/stopped" ;;
    CONT) rm -f "$sandbox/stopped" ;;
  esac
fi
record "\"$sig_name\"" "$sig_num" "[$json_pids]"
rc=0
for p in $pids; do
  n=${p#-}
  n=$(strip_zeros "$n")
  case $p in -*) n="-$n" ;; esac
  case $n in
    1|0|-1|-0) ;;
    *) echo "kill: ($n): No such process" >&2; rc=1 ;;
  esac
done
exit $rc
"""

_PKILL = r"""
sig_name=TERM
sig_num=15
names=""
# Options that take a value; for killall, -s is the signal, for pkill it is a session id.
with_value="-g -G -P -s -t -u -U -F -c"
if [ "$me" = killall ]; then with_value="-o -y -u -n -Z"; fi
while [ $# -gt 0 ]; do
  a=$1
  shift
  case " $with_value " in *" $a "*) shift; continue ;; esac
  case $a in
    --signal|-s)
      [ $# -gt 0 ] || { echo "$me: option requires an argument -- '$a'" >&2; exit 2; }
      resolve "$1" || { echo "$me: unknown signal name $1" >&2; exit 2; }
      shift ;;
    --signal=*)
      resolve "${a#--signal=}" || { echo "$me: unknown signal name ${a#--signal=}" >&2; exit 2; } ;;
    --) names="$names $*"; break ;;
    -*) resolve "${a#-}" || : ;;
    *) names="$names $a" ;;
  esac
done
record "\"$sig_name\"" "$sig_num" "[]"
if [ "$me" = killall ]; then
  for n in $names; do echo "$n: no process found" >&2; done
fi
exit 1
"""


_CAT_PASSTHROUGH = r"""
# Anything but the container's /proc/1 is the machine's cat, found on PATH without this folder
# and its guards.
here=$(cd "$(dirname "$0")" && pwd)
real_path=""
IFS=:
for d in $PATH; do
  case $d in
    ""|"$here"|"$here/@GUARD@") ;;
    *) real_path="$real_path${real_path:+:}$d" ;;
  esac
done
unset IFS
ours=0
for a in "$@"; do
  case $a in /proc/1|/proc/1/*) ours=1 ;; esac
done
if [ $ours -eq 0 ]; then PATH=$real_path exec cat "$@"; fi
"""

_CAT = r"""
# mask N...: the /proc hexadecimal mask of signal numbers 1-31.
mask() {
  m=0
  for n in "$@"; do
    if [ "$n" -ge 1 ] && [ "$n" -le 31 ]; then m=$((m | (1 << (n - 1)))); fi
  done
  printf '%016x' "$m"
}

handled_numbers() {
  [ -f "$sandbox/handles" ] || return 0
  for h in $(tr '[:lower:],;' '[:upper:]  ' < "$sandbox/handles"); do
    if resolve "$h"; then printf '%s ' "$sig_num"; fi
  done
}

status() {
  state="S (sleeping)"
  if no_init; then
    name=main; blocked=$(mask); caught=$(mask $(handled_numbers))
  else
    name=tini; caught=$(mask)
    blocked=$(mask 1 2 3 4 5 6 7 8 10 11 12 13 14 15 16 17 18 20 21 22 23 24 25 26 27 28 29 30 31)
  fi
  printf 'Name:\t%s\nUmask:\t0022\nState:\t%s\nTgid:\t1\nNgid:\t0\nPid:\t1\nPPid:\t0\n' \
    "$name" "$state"
  printf 'SigQ:\t0/63382\nSigPnd:\t%016x\nShdPnd:\t%016x\n' 0 0
  printf 'SigBlk:\t%s\nSigIgn:\t%016x\nSigCgt:\t%s\n' "$blocked" 0 "$caught"
}

rc=0
for a in "$@"; do
  case $a in
    /proc/1/status) status ;;
    /proc/1/task/1/children) no_init || printf '7 ' ;;
    /proc/1|/proc/1/*) echo "cat: $a: No such file or directory" >&2; rc=1 ;;
    *) PATH=$real_path cat "$a" || rc=1 ;;
  esac
done
exit $rc
"""


_POWER = r"""
record null null "[]"
echo "$me: recorded by the allocbridge sandbox stand-in; nothing was done" >&2
exit 0
"""


_GUARD = r"""#!/bin/sh
# allocbridge local-cluster guard: only reached when the stand-in of this name is missing.
echo "@NAME@: allocbridge sandbox guard: the stand-in @NAME@ is missing from @FOLDER@;" \
  "the machine's @NAME@ was not run" >&2
exit 126
"""


def script(name: str) -> str:
    """The full text of the stand-in `name`."""
    head = _HEAD.replace("@NAME@", name)
    if name == "cat":
        passthrough = _CAT_PASSTHROUGH.replace("@GUARD@", GUARD_FOLDER)
        return head + passthrough + _SANDBOX + _SIGNAL_TABLE + _CAT
    if name == "kill":
        body = _KILL
    elif name in ("pkill", "killall"):
        body = _PKILL
    elif name in ("reboot", "shutdown", "halt", "poweroff"):
        body = _POWER
    else:
        raise ValueError(f"no stand-in named {name!r}")
    return head + _SANDBOX + _SIGNAL_TABLE + _RECORDING + body


def guard_script(name: str, folder: Path) -> str:
    """The refusal that stands behind the stand-in `name` of `folder`."""
    return _GUARD.replace("@NAME@", name).replace("@FOLDER@", str(folder))


def write_standins(folder: Path) -> Path:
    """Write every stand-in into `folder` and its guard into `folder/guard` (created,
    world-readable and executable)."""
    guard = folder / GUARD_FOLDER
    for place in (folder, guard):
        place.mkdir(parents=True, exist_ok=True)
        os.chmod(place, 0o755)
    for name in NAMES:
        write_atomic(folder / name, script(name), mode=0o755)
        write_atomic(guard / name, guard_script(name, folder), mode=0o755)
    return folder


def search_path(folder: Path) -> str:
    """The PATH entries to put before the machine's: the stand-ins, then their guards."""
    return f"{folder}:{folder / GUARD_FOLDER}"


def write_atomic(path: Path, text: str, *, mode: int = 0o644) -> None:
    """Write so that a reader (a poller, an exec resolving a name) never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
