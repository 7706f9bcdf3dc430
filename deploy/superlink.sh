#!/usr/bin/env bash
# Start a SuperLink whose state (runs, registered SuperNodes) survives a restart.
#
# usage: deploy/superlink.sh --state DIR (--certs DIR | --insecure) [--host H] [--port P]
#   --state DIR   where the state database lives (DIR/state.db); reuse it across restarts
#   --certs DIR   TLS with DIR/{ca.crt,server.crt,server.key} and SuperNode authentication
#                 (only SuperNodes registered with `flwr supernode register` may connect);
#                 make DIR with deploy/make_certs.sh
#   --insecure    no TLS, no SuperNode authentication (a first try on one machine only)
#   --host/--port the one address Flower 1.41 serves the Fleet, Control and Runtime APIs on
#                 (default 127.0.0.1:9093; 0.0.0.0 to accept SuperNodes from other machines)
# Runs in the foreground (`exec`): its PID is the SuperLink's. Stop it with `kill PID`.
set -euo pipefail
state=""; certs=""; insecure=0; host=127.0.0.1; port=9093
while [ $# -gt 0 ]; do
  case $1 in
    --state) state=$2; shift 2 ;;
    --certs) certs=$2; shift 2 ;;
    --insecure) insecure=1; shift ;;
    --host) host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    *) echo "unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$state" ] || { echo "--state DIR is required (the SuperLink's database lives there)" >&2; exit 2; }
[ -n "$certs" ] || [ "$insecure" = 1 ] || { echo "give --certs DIR (TLS + node auth) or --insecure" >&2; exit 2; }
mkdir -p "$state"
args=(--database "$state/state.db" --host "$host" --port "$port" --disable-runtime-dependency-installation)
if [ -n "$certs" ]; then
  for f in ca.crt server.crt server.key; do
    [ -f "$certs/$f" ] || { echo "missing $certs/$f: run deploy/make_certs.sh $certs N first" >&2; exit 2; }
  done
  args+=(--ssl-ca-certfile "$certs/ca.crt" --ssl-certfile "$certs/server.crt" --ssl-keyfile "$certs/server.key"
         --enable-supernode-auth)
else
  args+=(--insecure)
fi
exec flower-superlink "${args[@]}"
