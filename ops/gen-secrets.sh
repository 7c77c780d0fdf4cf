#!/bin/sh
# Make everything a run's NATS needs for auth and TLS, in one folder:
#   ca.pem ca-key.pem             a self-signed CA (keep ca-key.pem offline after this)
#   server-cert.pem server-key.pem the server's certificate, signed by the CA
#   learn.password rollout.password verify.password ops.password autoscale.password
#                                 one random password per role user (mode 600)
#   nats.env                      RLVR_<ROLE>_PASSWORD=... for the server only
#   nats.conf accounts.conf       ops/nats/auth-tls.conf and accounts.conf, for RUN
#
#   ops/gen-secrets.sh [-r RUN] [-o DIR] [-c CERT_DIR] [-H HOST]... [-f]
#
#   -r RUN       run id the users are scoped to (default: demo)
#   -o DIR       output folder (default: ops/secrets; it is git-ignored)
#   -c CERT_DIR  where the server will find the certificates (default:
#                /etc/nats/certs, as compose and k8s mount them)
#   -H HOST      an extra DNS name or IP for the server certificate (repeatable);
#                `nats`, `nats.rlvr`, `nats.rlvr.svc`, `localhost` and 127.0.0.1 are always in
#   -f           overwrite an existing folder's files (new CA, new passwords)
#
# Needs: a POSIX sh, openssl (1.1.1 or 3.x), sed, od, tr. Nothing is downloaded.
set -eu

RUN=demo
OUT=""
CERT_DIR=/etc/nats/certs
HOSTS=""
FORCE=0
HERE=$(cd "$(dirname "$0")" && pwd)

while getopts "r:o:c:H:fh" opt; do
  case $opt in
    r) RUN=$OPTARG ;;
    o) OUT=$OPTARG ;;
    c) CERT_DIR=$OPTARG ;;
    H) HOSTS="$HOSTS $OPTARG" ;;
    f) FORCE=1 ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
  esac
done
OUT=${OUT:-$HERE/secrets}

# The run id names subjects and streams: the same rule as the actors' config.
if ! printf '%s' "$RUN" | grep -Eq '^[A-Za-z0-9_-]{1,64}$'; then
  echo "gen-secrets: run id '$RUN' must be 1-64 letters, digits, '_' or '-'" >&2
  exit 2
fi
command -v openssl >/dev/null 2>&1 || { echo "gen-secrets: openssl is required" >&2; exit 2; }
if [ -e "$OUT/ca.pem" ] && [ "$FORCE" != 1 ]; then
  echo "gen-secrets: $OUT already holds secrets; -f replaces them (every role needs the new ones)" >&2
  exit 1
fi

umask 077
mkdir -p "$OUT"
printf '*\n' > "$OUT/.gitignore"

# Certificates: EC P-256 (fast, widely supported), valid for a year.
SAN="DNS:nats,DNS:nats.rlvr,DNS:nats.rlvr.svc,DNS:nats.rlvr.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
for h in $HOSTS; do
  if printf '%s' "$h" | grep -Eq '^[0-9.]+$|:'; then SAN="$SAN,IP:$h"; else SAN="$SAN,DNS:$h"; fi
done
EC="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
# shellcheck disable=SC2086
openssl req -x509 $EC -nodes -days 365 -subj "/CN=rlvr-$RUN-ca" \
  -keyout "$OUT/ca-key.pem" -out "$OUT/ca.pem" 2>/dev/null
# shellcheck disable=SC2086
openssl req $EC -nodes -subj "/CN=nats" -keyout "$OUT/server-key.pem" -out "$OUT/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$SAN" > "$OUT/server.ext"
openssl x509 -req -in "$OUT/server.csr" -CA "$OUT/ca.pem" -CAkey "$OUT/ca-key.pem" -CAcreateserial \
  -days 365 -extfile "$OUT/server.ext" -out "$OUT/server-cert.pem" 2>/dev/null
rm -f "$OUT/server.csr" "$OUT/server.ext" "$OUT/ca.srl"
chmod 644 "$OUT/ca.pem" "$OUT/server-cert.pem"

# Passwords: 32 random bytes, hex (no character NATS config or a shell would mangle).
: > "$OUT/nats.env"
for role in learn rollout verify ops autoscale; do
  pw=$(openssl rand -hex 32)
  printf '%s\n' "$pw" > "$OUT/$role.password"
  upper=$(printf '%s' "$role" | tr '[:lower:]' '[:upper:]')
  printf 'RLVR_%s_PASSWORD=%s\n' "$upper" "$pw" >> "$OUT/nats.env"
done

# The server config for RUN: only the run id and the certificate folder change.
render() {
  sed -e "s/rlvr\.demo\./rlvr.$RUN./g" -e "s/RLVR_demo_/RLVR_${RUN}_/g" \
      -e "s/rlvr-demo-/rlvr-$RUN-/g" -e "s/RUN_demo/RUN_$RUN/g" \
      -e "s#/etc/nats/certs/#$CERT_DIR/#g" -e "s/run id \`demo\`/run id \`$RUN\`/" "$1"
}
render "$HERE/nats/auth-tls.conf" > "$OUT/nats.conf"
render "$HERE/nats/accounts.conf" > "$OUT/accounts.conf"
chmod 644 "$OUT/nats.conf" "$OUT/accounts.conf"

echo "gen-secrets: run $RUN: secrets in $OUT"
echo "  server:  nats.conf accounts.conf server-cert.pem server-key.pem ca.pem + the variables in nats.env"
echo "  roles:   <role>.password + ca.pem, each role only its own password"
echo "  k8s:     kubectl -n rlvr create secret generic rlvr-nats-auth --from-file=$OUT"
