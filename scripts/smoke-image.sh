#!/usr/bin/env bash
# Runs the image built by scripts/build-image.sh as the chart runs the sidecar, against the simulator,
# and checks that `serve` in it does its job.
#
# The simulator (from .venv: it is not in the image) serves Keystone, Nova and Kubernetes on loopback;
# the image runs with podman on the host network, as 65532:65532 with a read-only root and no writable
# /tmp (readOnlyRootFilesystem), with the chart's environment and memory limit, a cloud.conf and an
# in-cluster service account mounted read-only where a pod would have them (scripts/lib/image_smoke.py
# setup). image_smoke.py check then plays one external-dns loop against it (negotiation, Records,
# AdjustEndpoints, ApplyChanges, Records); the container must then stop cleanly on SIGTERM.
# Everything started here is stopped on exit, whatever happens.
#
# Exit status: 0 checked; 3 this machine cannot run containers (see scripts/lib/image.sh); else failed.
#
# Environment:
#   LANDB_IMAGE           the image (default: localhost/landb-webhook:dev)
#   LANDB_SMOKE_TIMEOUT   seconds to wait for each of: the simulator, serve, the checks (default: 120)
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib/image.sh
source scripts/lib/image.sh

image="${LANDB_IMAGE:-localhost/landb-webhook:dev}"
timeout_seconds="${LANDB_SMOKE_TIMEOUT:-120}"

ensure_image_tools podman runc
podman image exists "$image" || { say "no image $image: run scripts/build-image.sh first" >&2; exit 1; }
[[ -x .venv/bin/landb-webhook-simulator ]] || { say "no .venv (the simulator runs from it): make .venv/.synced" >&2; exit 1; }

work="$(mktemp -d)"
container="landb-webhook-smoke-$$"
simulator_pid=""

finish() {
  local status=$?
  if ((status != 0)); then
    say "FAILED; the container's last log lines, then the simulator's:" >&2
    podman logs --tail 20 "$container" >&2 2>&1 || true
    tail -n 20 "$work/simulator.log" >&2 2>/dev/null || true
  fi
  podman rm --force --time 10 "$container" >/dev/null 2>&1 || true
  if [[ -n "$simulator_pid" ]]; then
    kill "$simulator_pid" 2>/dev/null || true
    wait "$simulator_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_for WHAT COMMAND...: polls COMMAND until it succeeds; fails after $timeout_seconds.
wait_for() {
  local what="$1" deadline=$((SECONDS + timeout_seconds))
  shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      say "timed out after $timeout_seconds s waiting for $what" >&2
      return 1
    fi
    sleep 0.2
  done
}

simulator_ready_or_gone() { grep -q '^Stop with Ctrl-C' "$work/simulator.log" || ! kill -0 "$simulator_pid"; }
container_running() { [[ "$(podman container inspect --format '{{.State.Running}}' "$container")" == true ]]; }
# The logs read whole first: a grep that stops at its match would cut podman logs short (SIGPIPE).
serving_line() {
  local logs
  logs="$(podman logs "$container" 2>&1)" && grep -m 1 '"event": *"serving"' <<<"$logs"
}
serving_or_gone() { serving_line || ! container_running; }
# cgroup_memory V2_FILE V1_FILE: a memory figure of the container's cgroup, as the container sees it.
cgroup_memory() {
  podman exec "$container" sh -c "cat /sys/fs/cgroup/$1 2>/dev/null || cat /sys/fs/cgroup/memory/$2"
}

.venv/bin/landb-webhook-simulator serve --state-dir "$work/state" --port 0 >"$work/simulator.log" 2>&1 &
simulator_pid=$!
wait_for "the simulator" simulator_ready_or_gone
kill -0 "$simulator_pid" 2>/dev/null || { say "the simulator exited" >&2; exit 1; }
say "$(grep -m 1 'listening on' "$work/simulator.log")"

# The simulated LanDB's DNS server, which the webhook's DNS watch asks (loopback only).
simulator_dns() {
  grep -m 1 -o 'LanDB DNS for cern.ch on [^ ]*' "$work/simulator.log" | awk '{print $NF}'
}

# How the chart runs the sidecar: its environment and memory limit, the credentials Secret it mounts and
# the service account a pod gets, made from the simulator's.
mapfile -t chart_options < <(.venv/bin/python scripts/lib/image_smoke.py setup "$work/state" "$work/pod")
mapfile -t run_options < <(podman_run_options)
podman run --detach --name "$container" "${run_options[@]}" "${chart_options[@]}" --network host \
  --user 65532:65532 --read-only --read-only-tmpfs=false --log-driver k8s-file \
  --env LANDB_API_HOST=127.0.0.1 --env LANDB_API_PORT=0 \
  --env LANDB_HEALTH_HOST=127.0.0.1 --env LANDB_HEALTH_PORT=0 \
  --env LANDB_DNS_RESOLVERS="$(simulator_dns)" \
  "$image" serve >/dev/null
say "started $image as $container (runc, host network, 65532:65532, read-only root, the chart's settings)"

wait_for "serve to log that it is serving" serving_or_gone
line="$(serving_line)" || { say "the container exited before serving" >&2; exit 1; }
read -r api health < <(.venv/bin/python -c 'import json, sys
line = json.loads(sys.argv[1])
print(line["api"], line["health"])' "$line")
say "serving: API $api, health $health"

applied_limit="$(cgroup_memory memory.max memory.limit_in_bytes)"
[[ "$applied_limit" =~ ^[0-9]+$ ]] || { say "memory limit not applied (memory.max: $applied_limit)" >&2; exit 1; }

.venv/bin/python scripts/lib/image_smoke.py check "$api" "$health" "$timeout_seconds"

peak="$(cgroup_memory memory.peak memory.max_usage_in_bytes)"
podman stop --time 20 "$container" >/dev/null
exit_code="$(podman container inspect --format '{{.State.ExitCode}}' "$container")"
((exit_code == 0)) || { say "serve exited $exit_code on SIGTERM, not 0" >&2; exit 1; }
say "passed: serve in $image answered the simulator and stopped cleanly on SIGTERM" \
  "(memory limit $((applied_limit / 1048576)) MiB, peak $((peak / 1048576)) MiB)"
