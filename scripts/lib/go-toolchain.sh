# Sourced by the scripts/install-*.sh that build a Go program from the module proxy.

# go_usable MINIMUM CONSEQUENCE: true when a Go toolchain >= MINIMUM is on PATH (its version then in
# $go_version); otherwise says why, then CONSEQUENCE, on stdout and returns 1.
go_usable() {
  local minimum="$1" consequence="$2"
  if ! command -v go >/dev/null 2>&1; then
    printf '%s: Go is not on PATH: %s\n' "${0##*/}" "$consequence"
    return 1
  fi
  go_version="$(go env GOVERSION)"
  go_version="${go_version#go}"
  if [[ "$(printf '%s\n%s\n' "$minimum" "$go_version" | sort -V | head -n 1)" != "$minimum" ]]; then
    printf '%s: Go %s is older than the %s needed: %s\n' "${0##*/}" "$go_version" "$minimum" "$consequence"
    return 1
  fi
}

# go_build_env TOOLS_DIR: the environment a wrapper-module build runs in. Everything under TOOLS_DIR, so one
# `rm -rf` undoes it (the caches shared by the install scripts); the local toolchain only (no toolchain
# download); static binaries; no VCS stamping (there is no checkout); go.sum written by the build itself
# (the wrapper has none).
go_build_env() {
  export GOMODCACHE="$1/go/mod"
  export GOCACHE="$1/go/build-cache"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false -trimpath"
}
