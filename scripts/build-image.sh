#!/usr/bin/env bash
# Builds the Dockerfile into a local image with Debian's packages only, then says what the image holds.
#
# No registry but Debian's and PyPI is reachable here, so the Dockerfile's default base (python:*-slim)
# cannot be pulled. Its stand-in is built from Debian bookworm itself: a root filesystem made by
# mmdebstrap (Python 3.11, pip, ca-certificates; usr merged; docs, man pages and locales left out),
# imported with buildah as a local image and passed as PYTHON_IMAGE. The Dockerfile is then built with
# `buildah build --isolation chroot`; its RUN steps see the host's CA bundle mounted over the image's
# (pip and uv need it behind a TLS-inspecting proxy), a mount that is never part of a layer.
#
# What is verified: apt checks every package against the Release files signed with Debian's own archive
# keys (KEYRING, given explicitly: no other key the host trusts counts); the root filesystem's SHA-256 is
# recorded beside it when made and checked before each use, so a cached one changed since is refused; in
# the Dockerfile, uv, the build backend and every dependency are checked by hash (image-pins/, uv.lock).
#
# Idempotent: the root filesystem is cached, keyed by everything it is made from, so a second run only
# rebuilds the Dockerfile (pip and uv downloads come from buildah's cache mounts).
# Installs mmdebstrap, buildah, podman and runc with apt-get when missing (as root).
#
# Exit status: 0 built and checked; 3 this machine cannot build images at all (the reason on stderr,
# starting with "cannot build images here"); anything else a real failure.
#
# Environment:
#   LANDB_TOOLS_DIR   cache directory (default: ~/.cache/landb-webhook); the root filesystem lands in
#                     <dir>/image/ (remove it to take Debian's newest security updates)
#   LANDB_IMAGE       the image to build (default: localhost/landb-webhook:dev)
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib/image.sh
source scripts/lib/image.sh

readonly SUITE="bookworm"
readonly KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"
readonly BASE_PACKAGES="python3,python3-pip,ca-certificates"
readonly MIRRORS=(
  "deb http://deb.debian.org/debian $SUITE main"
  "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main"
)
# Left out of the root filesystem: documentation (but not the licences), man pages, locales. And dpkg
# does not sync each file it unpacks, as in Debian's own container images (a failed build is redone).
readonly DPKG_OPTIONS=(
  "force-unsafe-io"
  "path-exclude=/usr/share/doc/*"
  "path-include=/usr/share/doc/*/copyright"
  "path-exclude=/usr/share/man/*"
  "path-exclude=/usr/share/info/*"
  "path-exclude=/usr/share/locale/*"
  "path-exclude=/usr/share/lintian/*"
)
# Debian marks its Python as externally managed (PEP 668); the image's pip must install uv all the same.
# shellcheck disable=SC2016 # $1 is mmdebstrap's, expanded by the hook
readonly CUSTOMIZE='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'

image="${LANDB_IMAGE:-localhost/landb-webhook:dev}"
cache_dir="${LANDB_TOOLS_DIR:-$HOME/.cache/landb-webhook}/image"

# The packages and settings above, hashed: change any of them and a new root filesystem is made.
base_key="$(printf '%s\n' "$SUITE" "$KEYRING" "$BASE_PACKAGES" "${MIRRORS[@]}" "${DPKG_OPTIONS[@]}" "$CUSTOMIZE" |
  sha256sum | cut -c1-12)"
base_tar="$cache_dir/$SUITE-python3-$base_key.tar"
base_image="localhost/landb-webhook-base:$SUITE-$base_key"

ensure_image_tools mmdebstrap buildah podman runc
[[ -r "$KEYRING" ]] || cannot_run "$KEYRING missing: apt-get install debian-archive-keyring"

start_seconds=$SECONDS
if [[ ! -f "$base_tar" ]]; then
  # A tarball (--format=tar), whose sha256 is recorded: a directory left by an earlier version is made anew.
  rm -rf "$base_tar" "$base_tar.partial"
  mkdir -p "$cache_dir"
  say "making the $SUITE root filesystem ($BASE_PACKAGES) with mmdebstrap"
  dpkg_options=()
  for option in "${DPKG_OPTIONS[@]}"; do dpkg_options+=("--dpkgopt=$option"); done
  mmdebstrap --quiet --format=tar --variant=apt --include="$BASE_PACKAGES" --keyring="$KEYRING" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr "${dpkg_options[@]}" \
    --customize-hook="$CUSTOMIZE" "$SUITE" "$base_tar.partial" "${MIRRORS[@]}"
  (cd "$cache_dir" && sha256sum "$(basename "$base_tar.partial")" | sed 's/\.partial$//' >"$base_tar.sha256")
  mv "$base_tar.partial" "$base_tar"
  say "root filesystem cached at $base_tar ($((SECONDS - start_seconds)) s), sha256 $(cut -c1-16 "$base_tar.sha256")…"
fi
# The cached root filesystem is the one made above: its hash recorded then, checked now.
[[ -s "$base_tar.sha256" ]] && (cd "$cache_dir" && sha256sum --check --quiet "$base_tar.sha256") ||
  { say "$base_tar does not match its recorded sha256 (or has none): remove $cache_dir and run again" >&2; exit 1; }

if ! podman image exists "$base_image"; then
  say "importing the root filesystem as $base_image"
  container="$(buildah from scratch)"
  buildah add --quiet "$container" "$base_tar" / >/dev/null
  buildah config --env LANG=C.UTF-8 --cmd python3 "$container"
  buildah commit --quiet --rm "$container" "$base_image" >/dev/null
fi

say "building $image from the Dockerfile on $base_image"
host_ca_bundle="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
ca_mount=()
[[ -r "$host_ca_bundle" ]] && ca_mount=(--volume "$host_ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro")
replaced="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
build_seconds=$SECONDS
buildah build --quiet --isolation chroot --build-arg "PYTHON_IMAGE=$base_image" "${ca_mount[@]}" \
  --tag "$image" . >/dev/null
# The image this build replaced, now untagged, and nothing else (left if a container still uses it).
if [[ -n "$replaced" && "$replaced" != "$(podman image inspect --format '{{.Id}}' "$image")" ]]; then
  podman rmi "$replaced" >/dev/null 2>&1 || true
fi
say "built $image in $((SECONDS - build_seconds)) s ($((SECONDS - start_seconds)) s in all)"

describe_image "$image"
