#!/usr/bin/env bash
# Installs helm, and the official external-dns chart it renders in tests/integration/test_deploy_chart.py.
#
# Idempotent: does nothing when helm is already there with the wanted version.
# Exits 0 without building when no suitable Go toolchain is on PATH: the chart tests then skip themselves.
#
# Environment:
#   LANDB_TOOLS_DIR   cache directory (default: ~/.cache/landb-webhook); helm lands in <dir>/go/bin
#
# helm v3 has no `replace` directive, so a plain `go install helm.sh/helm/v3/cmd/helm@VERSION` from the
# module proxy builds it. The chart comes from the same place: it is in the Go module zip of
# sigs.k8s.io/external-dns (charts/external-dns, chart 1.21.1 at v0.22.0), fetched here with
# `go mod download`, so the tests render exactly the chart of the external-dns release we target.
set -euo pipefail

readonly HELM_VERSION="v3.22.0"
readonly REQUIRED_GO="1.26.0" # the `go` line of helm v3.22.0's go.mod
readonly EXTERNAL_DNS_MODULE="sigs.k8s.io/external-dns@v0.22.0"

tools_dir="${LANDB_TOOLS_DIR:-$HOME/.cache/landb-webhook}"
bin_dir="$tools_dir/go/bin"
helm="$bin_dir/helm"

say() { printf 'install-helm: %s\n' "$*"; }

installed_version() { "$helm" version --template '{{.Version}}' 2>/dev/null || true; }

# shellcheck source=lib/go-toolchain.sh
source "$(dirname "$0")/lib/go-toolchain.sh"

export GOMODCACHE="$tools_dir/go/mod"
export GOCACHE="$tools_dir/go/build-cache"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -trimpath"

if [[ -x "$helm" ]] && [[ "$(installed_version)" == "$HELM_VERSION" ]]; then
  say "helm $HELM_VERSION already installed at $helm"
else
  go_usable "$REQUIRED_GO" "helm not installed; the chart tests will be skipped" || exit 0
  mkdir -p "$bin_dir"
  say "building helm $HELM_VERSION with Go $go_version (a few minutes on first run)"
  start_seconds=$SECONDS
  GOBIN="$bin_dir" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  say "installed helm $(installed_version) at $helm in $((SECONDS - start_seconds)) s"
fi

# The chart: read-only in the module cache, where the tests look for it.
if command -v go >/dev/null 2>&1; then
  chart_dir="$(cd "$tools_dir" && go mod download -json "$EXTERNAL_DNS_MODULE" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')/charts/external-dns"
  say "external-dns chart at $chart_dir"
fi
