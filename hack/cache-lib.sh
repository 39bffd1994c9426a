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

# Their locals are prefixed _qf_: bash scopes variables dynamically, so a plain `local lock` here would shadow a
# caller's global `lock` inside the build function qf_cached calls (hack/vllm-venv.sh's lock file once read the
# lock's path instead and installed nothing: tests/unit/test_setup_scripts_lock.py).
qf_lock() { # entry: hold the entry's lock (fd 9) until the script exits; for a short script that is one build
  mkdir -p "$QF_CACHE/.locks"
  local _qf_lock; _qf_lock="$QF_CACHE/.locks/$(qf_slug "$1").lock"
  exec 9>"$_qf_lock"
  if ! flock -n 9; then
    qf_say "waiting for another set-up that is building $1 (lock: $_qf_lock)"
    flock 9
  fi
}

qf_cached() { # entry step fn [args...]
  local _qf_entry=$1 _qf_step=$2; shift 2
  local _qf_slug; _qf_slug=$(qf_slug "$_qf_entry")
  mkdir -p "$QF_CACHE/.locks" "$QF_CACHE/.timings" "$QF_CACHE/logs"
  local _qf_lock="$QF_CACHE/.locks/$_qf_slug.lock" _qf_log="$QF_CACHE/logs/$(qf_slug "$_qf_step").log"
  if [ -n "${QF_STEP_STATE:-}" ]; then qf_say "qf_cached $_qf_entry inside another qf_cached: call it after"; return 2; fi
  local _qf_state; _qf_state=$(mktemp "${TMPDIR:-/tmp}/qf-step.XXXXXX")
  exec 9>"$_qf_lock"
  if ! flock -n 9; then
    qf_say "waiting for another set-up that is building $_qf_entry (lock: $_qf_lock)"
    flock 9
    qf_say "the other set-up finished with $_qf_entry; checking what it left"
  fi
  local _qf_rc=0
  set +e
  ( set -e; QF_STEP=$_qf_step QF_STEP_LOG=$_qf_log QF_STEP_STATE=$_qf_state; "$@" ) >> "$_qf_log" 2>&1
  _qf_rc=$?
  set -e
  exec 9>&-
  local _qf_started _qf_hb _qf_what
  if read -r _qf_started _qf_hb _qf_what < "$_qf_state" 2>/dev/null; then
    kill "$_qf_hb" 2>/dev/null || true
    wait "$_qf_hb" 2>/dev/null || true
    local _qf_took=$(( $(date +%s) - _qf_started ))
    if [ "$_qf_rc" -eq 0 ]; then
      printf '%s %s\n' "$_qf_took" "$_qf_entry" > "$QF_CACHE/.timings/$(qf_slug "$_qf_step")"
      qf_say "$_qf_what: done in $(qf_duration "$_qf_took")"
    fi
  fi
  rm -f "$_qf_state"
  if [ "$_qf_rc" -ne 0 ]; then
    qf_say "$_qf_entry failed (exit $_qf_rc) after $(qf_duration $(( $(date +%s) - ${_qf_started:-$(date +%s)} ))); the last 30 lines of $_qf_log:"
    tail -n 30 "$_qf_log" >&"$QF_TERM_FD"
    return "$_qf_rc"
  fi
}
