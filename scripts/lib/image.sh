# shellcheck shell=bash
# Sourced by scripts/build-image.sh and scripts/smoke-image.sh.

# Exit status meaning "this machine cannot build or run images at all": .ci/run warns and goes on.
readonly EXIT_CANNOT_RUN_IMAGES=3

say() { printf '%s: %s\n' "${0##*/}" "$*"; }

# cannot_run REASON: say why, starting with the words .ci/run's warning repeats, and exit 3.
cannot_run() {
  say "cannot build or run images here: $*" >&2
  exit "$EXIT_CANNOT_RUN_IMAGES"
}

# ensure_image_tools COMMAND...: each command on PATH, installed with apt-get (package named as the
# command) when missing; then checks that this machine lets them work at all.
ensure_image_tools() {
  local missing=() command
  for command in "$@"; do
    command -v "$command" >/dev/null 2>&1 || missing+=("$command")
  done
  if ((${#missing[@]})); then
    ((EUID == 0)) || cannot_run "${missing[*]} missing; install them as root (apt-get install ${missing[*]})"
    command -v apt-get >/dev/null 2>&1 || cannot_run "${missing[*]} missing and no apt-get to install them"
    say "installing ${missing[*]} with apt-get"
    # Quiet unless it fails: then its own words say what went wrong (no network, no such package).
    local log
    log="$(mktemp)"
    if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      "${missing[@]}"; } >"$log" 2>&1; then
      tail -n 5 "$log" >&2
      rm -f "$log"
      cannot_run "apt-get could not install ${missing[*]}"
    fi
    rm -f "$log"
  fi
  # Rootful, the containers need mount and PID namespaces; rootless, a user namespace as well.
  local namespaces=(--mount --pid --fork)
  ((EUID == 0)) || namespaces=(--user --map-root-user "${namespaces[@]}")
  unshare "${namespaces[@]}" true 2>/dev/null || cannot_run "no namespaces for containers (unshare ${namespaces[*]})"
  local problem
  problem="$(podman info 2>&1 >/dev/null)" || cannot_run "podman does not work: ${problem%%$'\n'*}"
}

# The runtime every container here is started with. crun cannot set resource limits on these machines;
# runc can, but only rlimits no higher than the host's hard ones (podman's default open-files limit is
# higher, and raising it needs CAP_SYS_RESOURCE).
podman_run_options() {
  local open_files
  open_files="$(ulimit -Hn)"
  [[ "$open_files" == unlimited || "$open_files" -gt 4096 ]] && open_files=4096
  printf '%s\n' --runtime runc --ulimit "nofile=$open_files:$open_files" --ulimit nproc=1024:1024
}

# describe_image IMAGE: its size, uncompressed and gzip-compressed as a registry would store it, and
# what its environment holds; fails if that is more than the locked production requirements.
describe_image() {
  local image="$1" size compressed requirements run_options=()
  mapfile -t run_options < <(podman_run_options)
  size="$(podman image inspect --format '{{.Size}}' "$image")"
  compressed="$(podman image save "$image" 2>/dev/null | gzip -6 | wc -c)"
  say "$image is $((size / 1000000)) MB, $((compressed / 1000000)) MB compressed (gzip, as pushed)"
  requirements="$(mktemp)"
  .tools/bin/uv export --quiet --frozen --no-dev --no-emit-project --no-hashes --no-annotate \
    --no-header >"$requirements"
  chmod 0644 "$requirements"
  local status=0
  podman run --rm "${run_options[@]}" --network none --read-only --read-only-tmpfs=false \
    --volume "$PWD/scripts/lib/image_contents.py:/check/image_contents.py:ro" \
    --volume "$requirements:/check/requirements.txt:ro" \
    --entrypoint python "$image" /check/image_contents.py /check/requirements.txt || status=$?
  rm -f "$requirements"
  return "$status"
}
