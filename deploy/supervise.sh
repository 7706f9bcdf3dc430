#!/usr/bin/env bash
# Keep a command running: restart it whenever it exits, with a growing pause (2 s .. 60 s,
# back to 2 s after a run of over 5 minutes). A SuperNode exits when its SuperLink restarts
# or becomes unreachable for long (Flower 1.41: 401 on heartbeat, exit 250); under this
# loop it reconnects by itself.
#
# usage: deploy/supervise.sh COMMAND [ARG ...]
#   e.g. deploy/supervise.sh deploy/supernode.sh --partition 0 --num-partitions 2 \
#          --superlink 127.0.0.1:9093 --certs deploy/secrets
# SIGTERM/SIGINT to this script stops the command and the loop. For a service manager
# instead, see the systemd unit in docs/deployment.md.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARG ...]" >&2; exit 2; }
child=""
stop() { [ -n "$child" ] && kill "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0; }
trap stop TERM INT
pause=2
while true; do
  started=$(date +%s)
  "$@" &
  child=$!
  wait "$child"; code=$?
  child=""
  (( $(date +%s) - started > 300 )) && pause=2
  echo "supervise: '$1' exited with $code; restarting in ${pause}s" >&2
  sleep "$pause" & wait $!
  pause=$(( pause * 2 > 60 ? 60 : pause * 2 ))
done
