# shellcheck shell=sh
# Sourced by both `minimalkueue` wrappers (kueue/minimalkueue and operator/minimalkueue) so that
# the two controllers start the same way under Kueue's scheduler performance runner.
#
# The runner starts the controller (exec.Cmd.Start, which returns as soon as the exec happened)
# and goes straight on to its generator: nothing in it waits for the controller to be ready, so a
# controller that starts its watches sooner sees the first workloads sooner. To make both sides
# start equally, `pause_runner_until_ready READINESS` (called by a wrapper before it execs the
# controller) stops the runner (SIGSTOP to the wrapper's parent: its generator, recorder and
# job player stop with it; its etcd and kube-apiserver are processes of their own and keep
# serving), and leaves behind a detached poller that sends SIGCONT once the controller's own log
# (the wrapper's stderr, the runner's minimalkueue.err.log) says its caches are synced:
#
#   READINESS=ours    the operator's `cache synced` line (every informer listed and synced)
#   READINESS=kueue   a `Starting workers` line for every controller that logged `Starting
#                     EventSource` (controller-runtime, v0.24.1 in Kueue v0.19.2, logs its
#                     sources starting at once for every controller, then `Starting Controller`
#                     and `Starting workers` once that controller's sources synced)
#
# seen on two polls in a row (50 ms apart, the same for both sides)
#
# or when the controller exited, or after $KUEUE_HARNESS_READY_TIMEOUT seconds (default 60).
# The wrapper and the poller each log one line to stderr, which the harness reads:
#
#   <RFC 3339 UTC> kueue-harness wrapper: paused the runner (pid N) until the controller is ready
#   <RFC 3339 UTC> kueue-harness wrapper: resumed the runner (pid N): ready|timeout|controller exited
#
# Only when $KUEUE_HARNESS_PAUSE is 1 (the harness sets it), the parent is the runner (its
# /proc comm is `runner`) and stderr is a regular file; otherwise nothing is paused (a line says
# why, when KUEUE_HARNESS_PAUSE=1).

_kh_now() {
  date -u +%Y-%m-%dT%H:%M:%S.%NZ
}

# _kh_state PID: the process state letter (R, S, Z, ...) or nothing if it is gone.
_kh_state() {
  sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1
}

# _kh_names PATTERN FILE: the sorted, distinct controllers of FILE's lines with PATTERN: a line's
# "controller" value, else its logger's name (the third tab-separated field: Kueue's controllers
# log as resourceflavor-reconciler, workload-reconciler, ... without a "controller" value).
_kh_names() {
  awk -F '\t' -v pat="$1" 'index($0, pat) {
    if (match($0, /"controller": "[^"]*"/)) print substr($0, RSTART + 15, RLENGTH - 16); else print $3
  }' "$2" 2>/dev/null | sort -u
}

# _kh_ready KIND FILE: whether the controller logging to FILE says it is ready.
_kh_ready() {
  case "$1" in
    ours) grep -q 'preemption_operator\.controller\.operator: cache synced' "$2" ;;
    kueue)
      _kh_started="$(_kh_names 'Starting EventSource' "$2")"
      [ -n "$_kh_started" ] || return 1
      _kh_workers="$(_kh_names 'Starting workers' "$2")"
      ! printf '%s\n' "$_kh_started" | grep -qvxF -e "$_kh_workers"
      ;;
    *) return 1 ;;
  esac
}

pause_runner_until_ready() {
  kind="$1"
  [ "${KUEUE_HARNESS_PAUSE:-0}" = 1 ] || return 0
  runner=$PPID
  controller=$$
  log="$(readlink "/proc/$controller/fd/2" 2>/dev/null || true)"
  if [ "$(cat "/proc/$runner/comm" 2>/dev/null)" != runner ] || [ ! -f "$log" ]; then
    echo "$(_kh_now) kueue-harness wrapper: not pausing (the parent is not the runner, or stderr is not a file)" >&2
    return 0
  fi
  kill -STOP "$runner"
  echo "$(_kh_now) kueue-harness wrapper: paused the runner (pid $runner) until the controller is ready" >&2
  # Well under the 2 minutes the runner's own manager waits for its caches once it runs again.
  timeout="${KUEUE_HARNESS_READY_TIMEOUT:-60}"
  # Detached (its parent exits at once): not a child of the controller, so not in its rusage.
  (
    (
      trap '' INT TERM
      since=$(date +%s)
      outcome=timeout
      last=no
      while [ $(($(date +%s) - since)) -lt "$timeout" ]; do
        state="$(_kh_state "$controller")"
        if [ -z "$state" ] || [ "$state" = Z ] || [ "$state" = X ]; then
          outcome="controller exited"
          break
        fi
        if _kh_ready "$kind" "$log"; then
          # Kueue's controllers start one by one: the same answer twice in a row (for both
          # sides, so that both wait the same after their readiness line).
          if [ "$last" = yes ]; then
            outcome=ready
            break
          fi
          last=yes
        else
          last=no
        fi
        sleep 0.05
      done
      kill -CONT "$runner" 2>/dev/null || true
      echo "$(_kh_now) kueue-harness wrapper: resumed the runner (pid $runner): $outcome" >&2
    ) </dev/null >/dev/null &
  )
}
