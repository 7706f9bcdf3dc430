#!/usr/bin/env bash
# Start one SuperNode holding partition I of N of the run's dataset.
#
# usage: deploy/supernode.sh --partition I --num-partitions N --superlink HOST:PORT
#                            (--certs DIR | --insecure) [--port P]
#   --certs DIR   trust DIR/ca.crt and authenticate with the key pair DIR/node-I
#                 (registered on the SuperLink with `flwr supernode register DIR/node-I.pub`)
#   --port P      this SuperNode's own Runtime API port, where its ClientApp process talks
#                 to it (default 9094 + I, so several SuperNodes fit on one machine)
#   --threads T   torch threads of the node (default 0: all cores; give each SuperNode that
#                 shares a machine its share)
#   --warm-clientapps N   ClientApp processes kept started ahead of need, each handed one task
#                 (default: the node service's; 0: Flower's cold flwr-clientapp per message; fedtext.node.warm_exec)
#   --warm-start S  how they are made: fork (forked from a fork server that imported Flower
#                 once; the node service's default) or spawn (a new Python each)
#   --no-node-service   Flower's plain SuperNode: each message's ClientApp process loads
#                 torch, the data and the backbone anew (docs/performance.md compares)
# By default the SuperNode runs behind fedtext's node service (python -m fedtext.node.service:
# one long-lived process holding the backbone and the partition, which the per-message
# ClientApp asks over a private Unix socket; started and stopped with the SuperNode).
# Runs in the foreground (`exec`): its PID is the node's supervisor's (or the SuperNode's).
# To keep it running across SuperLink restarts and crashes, run it under deploy/supervise.sh
# or systemd (deploy/systemd/fedtext-supernode@.service).
set -euo pipefail
pid=""; num=""; superlink=""; certs=""; insecure=0; port=""; threads=0; service=1; warm=()
while [ $# -gt 0 ]; do
  case $1 in
    --partition) pid=$2; shift 2 ;;
    --num-partitions) num=$2; shift 2 ;;
    --superlink) superlink=$2; shift 2 ;;
    --certs) certs=$2; shift 2 ;;
    --insecure) insecure=1; shift ;;
    --port) port=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --warm-clientapps) warm+=(--warm-clientapps "$2"); shift 2 ;;
    --warm-start) warm+=(--warm-start "$2"); shift 2 ;;
    --no-node-service) service=0; shift ;;
    *) echo "unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $pid =~ ^[0-9]+$ && $num =~ ^[0-9]+$ ]] && [ "$pid" -lt "$num" ] \
  || { echo "need --partition I --num-partitions N with 0 <= I < N" >&2; exit 2; }
[ -n "$superlink" ] || { echo "--superlink HOST:PORT is required" >&2; exit 2; }
[ -n "$certs" ] || [ "$insecure" = 1 ] || { echo "give --certs DIR (TLS + node auth) or --insecure" >&2; exit 2; }
args=(--superlink "$superlink" --port "${port:-$((9094 + pid))}"
      --node-config "partition-id=$pid num-partitions=$num")
if [ -n "$certs" ]; then
  for f in ca.crt "node-$pid"; do
    [ -f "$certs/$f" ] || { echo "missing $certs/$f: run deploy/make_certs.sh $certs $num first" >&2; exit 2; }
  done
  args+=(--root-certificates "$certs/ca.crt" --auth-supernode-private-key "$certs/node-$pid")
else
  args+=(--insecure)
fi
if [ "$service" = 1 ]; then
  exec "${PYTHON:-python3}" -m fedtext.node.service --threads "$threads" "${warm[@]}" \
    -- flower-supernode "${args[@]}"
fi
exec flower-supernode "${args[@]}"
