#!/usr/bin/env bash
# Start a SuperLink whose state (runs, registered SuperNodes) survives a restart.
#
# usage: deploy/superlink.sh --state DIR (--certs DIR | --insecure) [--port P] [--host H]
#   --state DIR   where the state database lives (DIR/state.db); reuse it across restarts
#   --certs DIR   TLS with DIR/{ca.crt,server.crt,server.key} and SuperNode authentication
#                 (only SuperNodes registered with `flwr supernode register` may connect);
#                 make DIR with deploy/make_certs.sh
#   --insecure    no TLS, no SuperNode authentication (a first try on one machine only)
#   --port P      its port (default 9093)
#   --host H      its address: loopback only (default 127.0.0.1; also ::1, localhost).
#                 Flower 1.41 serves the Fleet, Control and Runtime APIs on this ONE
#                 listener, and the Control API (flwr run / ls / supernode register,
#                 unregister, ls) has no authentication of its own: whoever reaches it and
#                 trusts ca.crt controls the federation. SuperNodes on other machines
#                 connect through nginx, deploy/fleet_proxy.py (Fleet routes only, 403 for the
#                 rest); operators use 127.0.0.1:P on this host or an SSH tunnel to it.
#                 See docs/deployment.md. Another address is refused unless you also give
#   --allow-non-loopback  H is reachable from operators' machines only (a private admin
#                 network or a firewall does that, not this script)
# Runs in the foreground (`exec`): its PID is the SuperLink's. Stop it with `kill PID`.
# Needs fedtext importable by ${PYTHON:-python3} (the project's environment, as deploy/supernode.sh).
set -euo pipefail
state=""; certs=""; insecure=0; host=127.0.0.1; port=9093; any_host=0
while [ $# -gt 0 ]; do
  case $1 in
    --state) state=$2; shift 2 ;;
    --certs) certs=$2; shift 2 ;;
    --insecure) insecure=1; shift ;;
    --host) host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --allow-non-loopback) any_host=1; shift ;;
    *) echo "unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$state" ] || { echo "--state DIR is required (the SuperLink's database lives there)" >&2; exit 2; }
[ -n "$certs" ] || [ "$insecure" = 1 ] || { echo "give --certs DIR (TLS + node auth) or --insecure" >&2; exit 2; }
if ! [[ $host =~ ^127\.[0-9]+\.[0-9]+\.[0-9]+$ || $host == ::1 || $host == "[::1]" || $host == localhost ]]; then
  [ "$any_host" = 1 ] || { echo "refusing --host $host: the Control API would be reachable there (anyone who trusts" \
       "ca.crt could register/unregister SuperNodes, list runs and run apps). Keep the SuperLink on" \
       "127.0.0.1 and let SuperNodes in through nginx, deploy/fleet_proxy.py (docs/deployment.md); or, if" \
       "only operators can reach $host, add --allow-non-loopback" >&2; exit 2; }
fi
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
# Flower's SuperLink, its Fleet API holding a SuperNode's empty pull up to 2 s until a message comes
# (fedtext.server.superlink: messages reach nodes within milliseconds, idle nodes ask once per 2 s)
exec "${PYTHON:-python3}" -m fedtext.server.superlink "${args[@]}"
