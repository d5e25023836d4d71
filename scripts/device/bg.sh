#!/usr/bin/env bash
# Any command line in the background on the GPU machine, waited for across device calls (as
# session.sh does for its fixed stages), so no device time is lost between tool calls:
#   call 1:  bash scripts/device/bg.sh start '<commands>' && bash scripts/device/bg.sh wait 560
#   call 2+: bash scripts/device/bg.sh wait 560     (repeat until it prints "bg done")
# The commands run from the repository root with BG_OUT=/tmp/pocket-bg/out to write into;
# `wait` packs that folder, the log and /tmp/pocket-logs (run.sh's per-binary logs) into
# $OUT/bg.tgz of the call that is waiting, and prints the log's tail.
set -uo pipefail
STATE=/tmp/pocket-bg
case "${1:-}" in
start)
  mkdir -p "$STATE/out"
  rm -f "$STATE/done"
  printf '%s\n' "${2:?commands}" >"$STATE/cmd"
  BG_OUT="$STATE/out" setsid nohup bash -c "$2; echo \"rc=\$? \$(date -u +%T)\" >$STATE/done" \
    >"$STATE/log" 2>&1 </dev/null &
  echo "started $(date -u +%T)"
  ;;
wait)
  for _ in $(seq 1 "${2:-560}"); do
    [ -e "$STATE/done" ] && break
    sleep 1
  done
  if [ -n "${OUT:-}" ]; then
    tar czf "$OUT/bg.tgz" -C / tmp/pocket-bg $( [ -d /tmp/pocket-logs ] && echo tmp/pocket-logs ) 2>/dev/null
  fi
  tail -n "${BG_TAIL:-60}" "$STATE/log"
  [ -e "$STATE/done" ] && echo "bg done: $(cat "$STATE/done")"
  ;;
*)
  echo "usage: bg.sh start '<commands>' | wait [seconds]" >&2
  exit 2
  ;;
esac
