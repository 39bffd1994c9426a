# shellcheck shell=bash
# Sourced by the set-up scripts (build-binaries.sh, vllm-venv.sh, real-node-deps.sh): one lock per cache entry
# and a progress line for each long step. Python builds into the cache use devtools/qwen_fleet_dev/cachelock.py,
# which takes the same lock files (flock(2) on both sides), so a shell build and a Python build of one entry wait
# for each other too.
#
#   qf_cached ENTRY STEP FN [ARGS...]   run FN under $QF_CACHE/.locks/<ENTRY>.lock, its output into
#                                       $QF_CACHE/logs/<STEP>.log. ENTRY names one cache entry (component and
#                                       version: two versions build side by side); STEP names the step for its
#                                       timing ($QF_CACHE/.timings/<STEP>) and log. FN checks first whether the
#                                       entry is complete (it runs again under the lock: a second set-up that
#                                       waited finds the first one's work done) and calls qf_step_start just
#                                       before the long part.
#   qf_lock ENTRY                       hold ENTRY's lock until the script exits (a script that builds one entry).
#   qf_step_start WHAT COLD [WHY]       inside FN: one line that the step starts (what, why, how long it took
#                                       last time or COLD), then a heartbeat until FN returns.
#
# An entry is complete only when its build's last act (a rename into place, a .complete marker) is done, so a
# build interrupted midway leaves no complete entry, and the next one, under the lock, redoes it from scratch.
# The heartbeat is a line every QF_HEARTBEAT_SECONDS (20 on a terminal, 60 otherwise: CI's log stays short).

QF_CACHE=${QF_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qwen-fleet}
QF_TOOL=${QF_TOOL:-$(basename "$0" .sh)}
# Progress lines go to fd 8, the script's stderr when it started: a step's own output goes to its log.
exec 8>&2
QF_TERM_FD=8

qf_say() { printf '[%s %s] %s\n' "$QF_TOOL" "$(date +%H:%M:%S)" "$*" >&"$QF_TERM_FD"; }

qf_duration() { # seconds -> "1m 05s"
  local s=$1
  if [ "$s" -ge 60 ]; then printf '%dm %02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi
}

qf_slug() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'; }

qf_last_time() { # step cold -> "took 21m 03s last time (v1.36.3)" or "cold: COLD"
  local file="$QF_CACHE/.timings/$(qf_slug "$1")" secs what
  if [ -s "$file" ] && read -r secs what < "$file" && [ "$secs" -ge 0 ] 2>/dev/null; then
    printf 'took %s last time%s' "$(qf_duration "$secs")" "${what:+ ($what)}"
  else
    printf 'cold: %s' "$2"
  fi
}

qf_heartbeat() { # what started log: a line every interval while the script that started it lives
  local what=$1 started=$2 log=$3 parent=$$ interval
  if [ -n "${QF_HEARTBEAT_SECONDS:-}" ]; then interval=$QF_HEARTBEAT_SECONDS
  elif [ -t "$QF_TERM_FD" ]; then interval=20; else interval=60; fi
  while sleep "$interval"; do
    kill -0 "$parent" 2>/dev/null || exit 0
    local now; now=$(tail -n 1 "$log" 2>/dev/null | tr -d '\r' | cut -c1-90)
    qf_say "  ... $what: $(qf_duration $(( $(date +%s) - started ))) so far${now:+; now: $now}"
  done
}

qf_step_start() { # what cold [why]
  [ -n "${QF_STEP_STATE:-}" ] || { qf_say "qf_step_start outside qf_cached: $1"; return 0; }
  local started; started=$(date +%s)
  printf '\n=== %s %s (pid %s)\n' "$(date -u +%FT%TZ)" "$1" "$$" >&2  # where this run starts in the log
  qf_say "$1${3:+ ($3)}: starting, $(qf_last_time "$QF_STEP" "$2"); log: $QF_STEP_LOG"
  # The heartbeat must not hold the lock (fd 9) or the log open after this script is gone.
  qf_heartbeat "$1" "$started" "$QF_STEP_LOG" 9>&- >/dev/null &
  printf '%s %s %s\n' "$started" "$!" "$1" > "$QF_STEP_STATE"
}

qf_lock() { # entry: hold the entry's lock (fd 9) until the script exits; for a short script that is one build
  mkdir -p "$QF_CACHE/.locks"
  local lock; lock="$QF_CACHE/.locks/$(qf_slug "$1").lock"
  exec 9>"$lock"
  if ! flock -n 9; then
    qf_say "waiting for another set-up that is building $1 (lock: $lock)"
    flock 9
  fi
}

qf_cached() { # entry step fn [args...]
  local entry=$1 step=$2; shift 2
  local slug; slug=$(qf_slug "$entry")
  mkdir -p "$QF_CACHE/.locks" "$QF_CACHE/.timings" "$QF_CACHE/logs"
  local lock="$QF_CACHE/.locks/$slug.lock" log="$QF_CACHE/logs/$(qf_slug "$step").log"
  if [ -n "${QF_STEP_STATE:-}" ]; then qf_say "qf_cached $entry inside another qf_cached: call it after"; return 2; fi
  local state; state=$(mktemp "${TMPDIR:-/tmp}/qf-step.XXXXXX")
  exec 9>"$lock"
  if ! flock -n 9; then
    qf_say "waiting for another set-up that is building $entry (lock: $lock)"
    flock 9
    qf_say "the other set-up finished with $entry; checking what it left"
  fi
  local rc=0
  set +e
  ( set -e; QF_STEP=$step QF_STEP_LOG=$log QF_STEP_STATE=$state; "$@" ) >> "$log" 2>&1
  rc=$?
  set -e
  exec 9>&-
  local started hb what
  if read -r started hb what < "$state" 2>/dev/null; then
    kill "$hb" 2>/dev/null || true
    wait "$hb" 2>/dev/null || true
    local took=$(( $(date +%s) - started ))
    if [ "$rc" -eq 0 ]; then
      printf '%s %s\n' "$took" "$entry" > "$QF_CACHE/.timings/$(qf_slug "$step")"
      qf_say "$what: done in $(qf_duration "$took")"
    fi
  fi
  rm -f "$state"
  if [ "$rc" -ne 0 ]; then
    qf_say "$entry failed (exit $rc) after $(qf_duration $(( $(date +%s) - ${started:-$(date +%s)} ))); the last 30 lines of $log:"
    tail -n 30 "$log" >&"$QF_TERM_FD"
    return "$rc"
  fi
}
