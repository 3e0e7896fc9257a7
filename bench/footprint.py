"""What the product weighs and how far one ApplyChanges travels through it.

    .venv/bin/python -m bench.footprint            # all four figures, as a Markdown table
    .venv/bin/python -m bench.footprint --json     # the same, machine-readable

- **wheel**: the product wheel's size and its ``Requires-Dist`` (built with uv from this checkout);
- **venv**: the size of a fresh virtualenv holding the product wheel and the locked versions of its
  dependencies, as the image installs them (no simulator, no dev tools);
- **rss**: ``serve``'s resident memory once ``/readyz`` answers 200, against the simulator;
- **path**: the product files one ApplyChanges body enters, from the moment the webhook reads the request
  to the openstacksdk POST of a server's metadata, traced with a profile hook in the ``serve`` process.
  Only threads that serve the request count (the node watch and the Lease run on clocks of their own).

Everything runs on loopback against the simulator (started as its own process); nothing is left running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the tests' one wait-for-a-condition helper (as keystone_recovery)

from support.waiting import TimedOut, eventually  # noqa: E402

UV = ROOT / ".tools" / "bin" / "uv"
MEDIA_TYPE = "application/external.dns.webhook+json;version=1"
TRACE_HOOK = Path(__file__).with_name("_call_trace.py")


def is_background(thread: str) -> bool:
    """Threads on clocks of their own: the watches (``landb-<what>-watch``), the Lease, the first call."""
    return thread in ("landb-lease", "landb-openstack-first-call") or thread.endswith("-watch")


@dataclass
class Footprint:
    wheel_bytes: int = 0
    wheel_requires: list[str] = field(default_factory=list)
    venv_bytes: int = 0
    venv_distributions: int = 0
    serve_rss_kib: list[int] = field(default_factory=list)
    path_files: list[str] = field(default_factory=list)
    path_packages: list[str] = field(default_factory=list)
    path_entries: dict[str, int] = field(default_factory=dict)


def build_wheel(out: Path) -> Path:
    """The product wheel alone (``--package`` where the repository is a uv workspace)."""
    command = [str(UV), "build", "--wheel", "--out-dir", str(out)]
    if (ROOT / "packages").is_dir():  # a uv workspace: the product is one of its members
        command += ["--package", "landb-webhook"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    (wheel,) = out.glob("landb_webhook-*.whl")
    return wheel


def wheel_requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def production_venv(wheel: Path, where: Path) -> tuple[int, int]:
    """A venv with the wheel and the lock's versions of its runtime dependencies: (bytes, distributions)."""
    requirements = where / "requirements.txt"
    export = [str(UV), "export", "--frozen", "--no-dev", "--no-hashes", "--no-emit-project"]
    if (ROOT / "packages").is_dir():
        export += ["--package", "landb-webhook", "--no-emit-workspace"]
    exported = subprocess.run(export, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    requirements.write_text(exported)
    venv = where / "venv"
    subprocess.run([str(UV), "venv", "--quiet", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    install = [str(UV), "pip", "install", "--quiet", "--python", python]
    subprocess.run([*install, "--no-deps", "-r", str(requirements)], check=True, capture_output=True)
    subprocess.run([*install, "--no-deps", str(wheel)], check=True, capture_output=True)
    (site,) = venv.glob("lib/python*/site-packages")
    size = sum(path.stat().st_size for path in site.rglob("*") if path.is_file())
    distributions = len(list(site.glob("*.dist-info")))
    return size, distributions


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def simulator_command(state_dir: Path, port: int) -> list[str]:
    """The simulator as its own process: its own distribution where there is one."""
    try:
        import landb_simulator  # noqa: F401, PLC0415 (present only where the simulator is a distribution)
    except ImportError:
        return [sys.executable, "-m", "landb_webhook", "simulator", "--state-dir", str(state_dir),
                "--port", str(port)]  # fmt: skip
    return [
        sys.executable,
        "-m",
        "landb_simulator",
        "serve",
        "--state-dir",
        str(state_dir),
        "--port",
        str(port),
    ]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    try:
        eventually(condition, what=what, timeout=timeout, every=0.05)
    except TimedOut as timed_out:
        raise SystemExit(f"footprint: {timed_out}") from None


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def serve_against_simulator(work: Path, *, trace: Path | None) -> tuple[int, dict[str, object] | None]:
    """Start the simulator and ``serve``; answer (RSS at ready in KiB, the trace of one ApplyChanges)."""
    state_dir = work / "simulator"
    work.mkdir(parents=True, exist_ok=True)
    sim_port, api_port, health_port = free_port(), free_port(), free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LANDB_", "OS_"))}
    with running(simulator_command(state_dir, sim_port), env, work / "simulator.log"):
        wait_for(lambda: (state_dir / "kubeconfig").exists() and (state_dir / "clouds.yaml").exists(),
                 "the simulator's client configuration")  # fmt: skip
        settings = {
            "OS_CLIENT_CONFIG_FILE": str(state_dir / "clouds.yaml"),
            "LANDB_OS_CLOUD": "simulator",
            "LANDB_KUBECONFIG": str(state_dir / "kubeconfig"),
            "LANDB_API_PORT": str(api_port),
            "LANDB_HEALTH_PORT": str(health_port),
            "LANDB_OWNERSHIP_NAMESPACE": "default",
            "LANDB_LOG_FORMAT": "json",
        }
        clouds = (state_dir / "clouds.yaml").read_text()
        cloud_name = next(line.strip().rstrip(":") for line in clouds.splitlines()[1:] if line.strip())
        settings["LANDB_OS_CLOUD"] = cloud_name
        command = [sys.executable, "-m", "landb_webhook", "serve"]
        if trace is not None:
            command = [sys.executable, str(TRACE_HOOK), str(trace), "-m", "landb_webhook", "serve"]
        with running(command, {**env, **settings}, work / "serve.log") as serve:
            health = f"http://127.0.0.1:{health_port}"
            api = f"http://127.0.0.1:{api_port}"

            def ready() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return httpx.get(f"{health}/readyz", timeout=2).status_code == 200
                return False

            wait_for(ready, "serve's /readyz")
            rss = _rss_kib(serve.pid)
            if trace is None:
                return rss, None
            records = httpx.get(f"{api}/records", headers={"Accept": MEDIA_TYPE}, timeout=30).json()
            targets = sorted(
                {ip for record in records for ip in record["targets"] if record["recordType"] == "A"}
            )
            body = _create_body(targets or _ingress_ips(api))
            reply = httpx.post(
                f"{api}/records", content=body, headers={"Content-Type": MEDIA_TYPE}, timeout=30
            )
            if reply.status_code != 204:
                raise SystemExit(f"footprint: ApplyChanges answered {reply.status_code}: {reply.text}")
            wait_for(trace.exists, "the trace of the first metadata POST")
            return rss, json.loads(trace.read_text())


def _ingress_ips(api: str) -> list[str]:
    desired = json.dumps([{"dnsName": "footprint.cern.ch", "recordType": "A", "targets": ["192.0.2.1"]}])
    adjusted = httpx.post(
        f"{api}/adjustendpoints", content=desired, headers={"Content-Type": MEDIA_TYPE}, timeout=30
    ).json()
    return list(adjusted[0]["targets"])


def _create_body(targets: list[str]) -> str:
    record = {"dnsName": "footprint.cern.ch", "recordType": "A", "targets": targets}
    claim = {
        "dnsName": "a-footprint.cern.ch",
        "recordType": "TXT",
        "targets": ['"heritage=external-dns,external-dns/owner=footprint,external-dns/resource=ingress/x/y"'],
        "labels": {"ownedRecord": "footprint.cern.ch"},
    }
    return json.dumps({"Create": [record, claim]})


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit(f"footprint: no VmRSS for process {pid}")


def call_path(trace: dict[str, object]) -> tuple[list[str], list[str], dict[str, int]]:
    """Files and packages the request's threads entered, and how many times each file was entered.

    The window opens when the ApplyChanges body is read (the last body read before the POST to Nova: an
    AdjustEndpoints may come first) and closes at the POST."""
    events = trace["events"]
    assert isinstance(events, list)
    start = max(index for index, (_, _, function) in enumerate(events) if function == "read_body")
    sequences: dict[str, list[str]] = {}
    for thread, path, _ in events[start:]:
        if is_background(thread):
            continue
        sequences.setdefault(thread, []).append(path)
    entries: dict[str, int] = {}
    for sequence in sequences.values():
        previous = None
        for path in sequence:
            if path != previous:
                entries[path] = entries.get(path, 0) + 1
            previous = path
    files = sorted(entries)
    packages = sorted({path.rsplit("/", 1)[0] if "/" in path else "." for path in files})
    return files, packages, entries


def measure(*, skip_venv: bool = False, rss_runs: int = 3) -> Footprint:
    result = Footprint()
    with tempfile.TemporaryDirectory(prefix="landb-footprint-") as scratch:
        work = Path(scratch)
        wheel = build_wheel(work / "dist")
        result.wheel_bytes = wheel.stat().st_size
        result.wheel_requires = wheel_requires(wheel)
        if not skip_venv:
            result.venv_bytes, result.venv_distributions = production_venv(wheel, work)
        for run in range(rss_runs):  # it varies from start to start: what was loaded by the first calls
            rss, _ = serve_against_simulator(work / f"rss-{run}", trace=None)
            result.serve_rss_kib.append(rss)
        _, trace = serve_against_simulator(work / "path", trace=work / "path" / "trace.json")
        assert trace is not None
        result.path_files, result.path_packages, result.path_entries = call_path(trace)
    return result


def markdown(result: Footprint) -> str:
    mib = 1024 * 1024
    most = max(result.path_entries.items(), key=lambda item: item[1])
    rss = [kib / 1024 for kib in result.serve_rss_kib]
    runtime = [requirement for requirement in result.wheel_requires if "extra ==" not in requirement]
    lines = [
        "| figure | value |",
        "|---|---|",
        f"| product wheel | {result.wheel_bytes / 1024:.0f} KiB |",
        f"| its dependencies | {len(runtime)}: {', '.join(sorted(runtime))} |",
        f"| production venv | {result.venv_bytes / mib:.1f} MiB, {result.venv_distributions} distributions |",
        f"| serve RSS at ready, {len(rss)} starts | median {statistics.median(rss):.0f} MiB "
        f"(min {min(rss):.0f}, max {max(rss):.0f}) |",
        f"| ApplyChanges, HTTP read to Nova POST | {len(result.path_files)} files in "
        f"{len(result.path_packages)} packages; {sum(result.path_entries.values())} file entries; "
        f"most entered: {most[0]} ({most[1]}x) |",
        "",
        "Files entered: " + ", ".join(f"{path} ({result.path_entries[path]})" for path in result.path_files),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.footprint", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a Markdown table")
    parser.add_argument("--rss-runs", type=int, default=3, help="starts of serve to read the RSS of")
    parser.add_argument("--skip-venv", action="store_true", help="do not build the production virtualenv")
    args = parser.parse_args(argv)
    if not UV.exists():
        raise SystemExit("footprint: run `make .venv/.synced` first (it installs uv into .tools/)")
    result = measure(skip_venv=args.skip_venv, rss_runs=args.rss_runs)
    print(json.dumps(asdict(result), indent=2) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
