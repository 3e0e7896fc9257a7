#!/usr/bin/env bash
# Fetches the Gateway API standard CRDs (GatewayClass, Gateway, HTTPRoute, GRPCRoute, TLSRoute, ...) that the
# tests install into the real kube-apiserver (tests/support/kube_apiserver.py: install_gateway_api), for
# external-dns' gateway-httproute / gateway-grpcroute sources to read.
#
# Idempotent: does nothing when the CRDs of the wanted version are already there.
# Exits 0 without fetching when no Go toolchain is on PATH: the tests needing them then skip themselves.
#
# Environment:
#   LANDB_TOOLS_DIR   cache directory (default: ~/.cache/landb-webhook); the CRDs land in
#                     <dir>/gateway-api/<version>/standard
#
# The CRDs come from the Go module proxy, as the other tools do: they are in the module zip of
# sigs.k8s.io/gateway-api (config/crd/standard), the release external-dns v0.22.0 itself is built with.
# Copied out of the read-only module cache, so the tests find them without Go.
set -euo pipefail

readonly GATEWAY_API_VERSION="v1.6.1"
readonly MODULE="sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION"

tools_dir="${LANDB_TOOLS_DIR:-$HOME/.cache/landb-webhook}"
target="$tools_dir/gateway-api/$GATEWAY_API_VERSION/standard"

say() { printf 'install-gateway-api-crds: %s\n' "$*"; }

if compgen -G "$target/gateway.networking.k8s.io_httproutes.yaml" >/dev/null; then
  say "Gateway API $GATEWAY_API_VERSION standard CRDs already in $target; nothing to do"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  say "Go is not on PATH: Gateway API CRDs not fetched; the tests needing them will be skipped"
  exit 0
fi

# The same module cache as the Go tools (external-dns' build has usually downloaded this module already).
export GOMODCACHE="$tools_dir/go/mod" GOTOOLCHAIN=local GOFLAGS=-mod=mod
module_dir="$(cd "$tools_dir" && go mod download -json "$MODULE" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
if [[ -z "$module_dir" || ! -d "$module_dir/config/crd/standard" ]]; then
  say "go mod download $MODULE gave no config/crd/standard (Dir: '$module_dir')" >&2
  exit 1
fi
mkdir -p "$(dirname "$target")"
rm -rf "$target.partial"
cp -r "$module_dir/config/crd/standard" "$target.partial"
chmod -R u+w "$target.partial" # the module cache is read-only; the copy may be removed with rm -rf
rm -rf "$target"
mv "$target.partial" "$target"
say "installed $(find "$target" -name '*.yaml' | wc -l) files of Gateway API $GATEWAY_API_VERSION in $target"
