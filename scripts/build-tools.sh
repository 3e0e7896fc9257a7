#!/usr/bin/env bash
# Builds the Go tools the tests use, one step after another, for .ci/run to run in the background while
# the tests that need none of them run (tests/support/tool_builds.py orders the tests and waits).
#
# Usage: scripts/build-tools.sh STATUS_DIR
#
# Steps, in this order (tests/support/tool_builds.py STEPS says why): make e2e-tools (external-dns), make
# prometheus-tools (prometheus and promtool), make kube-tools (etcd and kube-apiserver), make deploy-tools
# (helm and the chart). Each writes its output to
# STATUS_DIR/<step>.log; when it ends, STATUS_DIR/<step>.ok (how long it took, and its CPU time) or
# STATUS_DIR/<step>.failed (a line with its exit status and times, then the last lines of its log) appears,
# written whole. A failed step does not stop the next.
# Exit status: 0 when every step built, 1 otherwise.
#
# Each step is as idempotent as its install script: on a machine that has the tools it ends in a second.
set -uo pipefail
readonly STEPS=(e2e-tools prometheus-tools kube-tools deploy-tools)

# The Go compiler and linker collect garbage less often: a quarter of the memory more for each compile,
# 15% less CPU time, the same binaries (k8s.io/api/core/v1 and its dependencies from an empty build
# cache: 101 and 103 CPU-seconds, 85 with GOGC=400; peak 450 -> 584 MB). Two compiles at a time fit in 24 GB.
export GOGC="${GOGC:-400}"

status_dir="${1:?usage: scripts/build-tools.sh STATUS_DIR}"
cd "$(dirname "$0")/.."
mkdir -p "$status_dir"

# publish STEP RESULT TEXT: STATUS_DIR/STEP.RESULT holding TEXT, renamed into place (never seen half-written).
publish() {
  printf '%s\n' "$3" >"$status_dir/$1.partial"
  mv -f "$status_dir/$1.partial" "$status_dir/$1.$2"
}

# The time bash reports for the step: wall seconds, then CPU seconds (user + system, the compilers
# included): the CPU time is what the step costs on any machine, however busy.
TIMEFORMAT='%R %U %S'
all_built=0
for step in "${STEPS[@]}"; do
  status=0
  { time make --no-print-directory "$step" >"$status_dir/$step.log" 2>&1; } 2>"$status_dir/$step.time" ||
    status=$?
  read -r wall user system <"$status_dir/$step.time"
  took="${wall%.*} s, $(awk -v u="$user" -v s="$system" 'BEGIN { printf "%.0f", u + s }') CPU-seconds"
  if ((status == 0)); then
    publish "$step" ok "make $step took $took"
    echo "build-tools: make $step took $took"
  else
    all_built=1
    publish "$step" failed "make $step exited $status after $took
$(tail -n 5 "$status_dir/$step.log")"
    echo "build-tools: make $step FAILED (exit $status after $took; log: $status_dir/$step.log)"
  fi
done
exit "$all_built"
