#!/usr/bin/env bash
# Make what a TLS + node-authenticated deployment needs, in one folder:
#   ca.crt / ca.key          a private certificate authority (the SuperNodes and `flwr` trust it)
#   server.crt / server.key  the SuperLink's certificate, signed by the CA, valid for
#                            localhost, 127.0.0.1, ::1 and every HOST given
#   node-<i> / node-<i>.pub  SuperNode i's authentication key pair (ECDSA P-384, OpenSSH
#                            format, as flower-supernode --auth-supernode-private-key and
#                            flwr supernode register want them), i = 0 .. N-1
#
# usage: deploy/make_certs.sh DIR N [HOST ...]
#   e.g. deploy/make_certs.sh deploy/secrets 2 superlink.lab.example 10.0.0.5
# Keep DIR private: ca.key and node-<i> are secrets. Needs openssl and ssh-keygen.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR N [HOST ...]" >&2; exit 2; }
dir=$1; n=$2; shift 2
[[ $n =~ ^[0-9]+$ ]] || { echo "N must be a number of SuperNodes, got '$n'" >&2; exit 2; }
mkdir -p "$dir"; chmod 700 "$dir"
san="DNS:localhost,IP:127.0.0.1,IP:::1"
for host in "$@"; do
  if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then san="$san,IP:$host"; else san="$san,DNS:$host"; fi
done
openssl req -x509 -newkey rsa:4096 -nodes -days 365 -subj "/CN=fedtext CA" \
  -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey rsa:4096 -nodes -subj "/CN=fedtext SuperLink" \
  -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
  "$san" > "$dir/server.ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -days 365 -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
rm -f "$dir/server.csr" "$dir/server.ext" "$dir/ca.srl"
for ((i = 0; i < n; i++)); do
  rm -f "$dir/node-$i" "$dir/node-$i.pub"
  ssh-keygen -q -t ecdsa -b 384 -N "" -C "fedtext-node-$i" -f "$dir/node-$i"
done
chmod 600 "$dir"/*.key "$dir"/node-* 2>/dev/null || true
chmod 644 "$dir"/*.crt "$dir"/node-*.pub
echo "made CA, SuperLink certificate ($san) and $n SuperNode key pairs in $dir"
