#!/usr/bin/env bash
# Makes a self-signed CA and a server certificate for the coordinator's TLS port, for local or
# single-cluster use. Writes into DIR (default $FULLBAND_TLS_DIR, else ~/.config/fullband/tls):
#   ca.crt ca.key          the CA (ca.crt is the bundle clients trust: FULLBAND_TLS_CA)
#   server.crt server.key  the server certificate, for localhost, 127.0.0.1, ::1 and --san names
# Idempotent: files that exist, verify and stay valid for 30 more days are kept; --force
# renews them all. Keys are EC P-256, readable by their owner only.
#
#   scripts/gen_certs.sh [--dir DIR] [--san DNS:host|IP:addr]... [--days N] [--force]
set -euo pipefail

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

dir=${FULLBAND_TLS_DIR:-${HOME:-.}/.config/fullband/tls}
days=825
force=0
extra_sans=()
while (($#)); do
  case "$1" in
    --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
    --san) extra_sans+=("${2:?--san needs DNS:name or IP:address}"); shift 2 ;;
    --days) days=${2:?--days needs a number}; shift 2 ;;
    --force) force=1; shift ;;
    -h | --help) usage 0 ;;
    *) echo "gen_certs: unknown argument '$1'" >&2; usage 2 >&2 ;;
  esac
done
[[ "$days" =~ ^[1-9][0-9]*$ ]] || { echo "gen_certs: --days must be a positive number" >&2; exit 2; }
for san in "${extra_sans[@]}"; do
  [[ "$san" =~ ^(DNS|IP):[^,[:space:]]+$ ]] ||
    { echo "gen_certs: --san '$san' is not DNS:name or IP:address" >&2; exit 2; }
done
command -v openssl >/dev/null || { echo "gen_certs: openssl is not installed" >&2; exit 1; }

sans="DNS:localhost,IP:127.0.0.1,IP:::1"
for san in "${extra_sans[@]}"; do sans+=",$san"; done

umask 077
mkdir -p "$dir"
cd "$dir"
tmp=$(mktemp -d .gen_certs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# Certificates expiring within 30 days (or half their lifetime, if shorter) are renewed.
month=$((days * 43200 < 2592000 ? days * 43200 : 2592000))

ca_ok() {
  [ -s ca.crt ] && [ -s ca.key ] && openssl x509 -in ca.crt -noout -checkend "$month" >/dev/null &&
    [ "$(openssl x509 -in ca.crt -noout -pubkey)" = "$(openssl pkey -in ca.key -pubout)" ]
}
server_ok() {
  [ -s server.crt ] && [ -s server.key ] && [ "$(cat server.san 2>/dev/null)" = "$sans" ] &&
    openssl verify -CAfile ca.crt server.crt >/dev/null 2>&1 &&
    openssl x509 -in server.crt -noout -checkend "$month" >/dev/null &&
    [ "$(openssl x509 -in server.crt -noout -pubkey)" = "$(openssl pkey -in server.key -pubout)" ]
}

# Every file is written under $tmp and renamed into place, so a crash leaves no torn file.
if ((force)) || ! ca_ok; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$tmp/ca.key" -out "$tmp/ca.crt" -days "$days" -subj "/CN=fullband local CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$tmp/log" ||
    { cat "$tmp/log" >&2; exit 1; }
  mv "$tmp/ca.key" ca.key
  mv "$tmp/ca.crt" ca.crt
  rm -f server.crt  # signed by the old CA
  echo "gen_certs: new CA in $dir/ca.crt"
fi
if ((force)) || ! server_ok; then
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$tmp/server.key" -out "$tmp/server.csr" -subj "/CN=localhost" 2>"$tmp/log" ||
    { cat "$tmp/log" >&2; exit 1; }
  printf '%s\n' "subjectAltName=$sans" "basicConstraints=critical,CA:FALSE" \
    "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" \
    >"$tmp/ext"
  openssl x509 -req -in "$tmp/server.csr" -CA ca.crt -CAkey ca.key \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$tmp/ext" \
    -out "$tmp/server.crt" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
  echo "$sans" >"$tmp/server.san"
  mv "$tmp/server.key" server.key
  mv "$tmp/server.crt" server.crt
  mv "$tmp/server.san" server.san
  echo "gen_certs: new server certificate in $dir/server.crt for $sans"
else
  echo "gen_certs: $dir is up to date (ca.crt, server.crt for $sans)"
fi
chmod 600 ca.key server.key
chmod 644 ca.crt server.crt
