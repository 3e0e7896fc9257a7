"""The landb-webhook command line: flags generated from Settings, env overrides, errors, serve's lifecycle
(and landb-webhook-simulator's, which reads the same LANDB_* variables for the demo)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import landb_webhook
from landb_simulator.cli import main as simulator_main
from landb_webhook.cli import api_host_problem, build_parser, load_settings, main
from landb_webhook.config import Settings, unknown_variables
from support.logging_state import restored_logging

WAIT = 10.0
"""Upper bound for a subprocess to start or stop; only reached when a test fails."""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("LANDB_")]:
        monkeypatch.delenv(name)


def settings_from(argv: list[str]) -> Settings:
    parser, settings_flags = build_parser()
    return load_settings(parser.parse_args(argv), settings_flags)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"landb-webhook {landb_webhook.__version__}"


def test_serve_has_a_flag_for_every_setting_with_its_description_and_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # undo argparse's line wrapping

    for name, field in Settings.model_fields.items():
        assert f"--{name.replace('_', '-')}" in help_text
        assert f"LANDB_{name.upper()}" in help_text
        assert field.description is not None
        assert " ".join(field.description.split()) in help_text


@pytest.mark.parametrize("command", ["serve", "status", "adopt"])
def test_help_shows_the_current_values_the_environment_sets(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANDB_API_PORT", "9999")
    monkeypatch.setenv("landb_log_level", "debug")  # read in any case, so shown in any case
    monkeypatch.setenv("LANDB_DRYRUN", "true")
    with pytest.raises(SystemExit):
        main([command, "--help"])

    out = capsys.readouterr().out
    assert out.endswith(
        "Current values: the defaults above, except these set in the environment now (a flag overrides "
        "them):\n  LANDB_API_PORT=9999\n  landb_log_level=debug\n\nUnknown, so start-up stops with exit 2:\n"
        "  LANDB_DRYRUN (did you mean LANDB_DRY_RUN?)\n"
    )


def test_environment_applies_and_flags_override_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANDB_API_PORT", "9999")
    monkeypatch.setenv("LANDB_DOMAIN_FILTER", "cern.ch,example.org")
    monkeypatch.setenv("LANDB_DRY_RUN", "true")
    monkeypatch.setenv("LANDB_LOG_LEVEL", "debug")

    from_env = settings_from(["serve"])
    overridden = settings_from(
        ["serve", "--api-port", "7000", "--no-dry-run", "--domain-filter", "a.ch,b.org"]
    )

    assert (from_env.api_port, from_env.dry_run, from_env.domain_filter) == (
        9999,
        True,
        ["cern.ch", "example.org"],
    )
    assert (overridden.api_port, overridden.dry_run, overridden.domain_filter) == (
        7000,
        False,
        ["a.ch", "b.org"],
    )
    assert overridden.log_level == "debug"  # untouched by flags: still from the environment


def test_flags_of_every_kind_reach_the_settings() -> None:
    settings = settings_from(
        [
            "serve",
            "--dry-run",
            "--kubeconfig",
            "/etc/kube/config",
            "--registry",
            "noop",
            "--request-timeout",
            "4.5",
            "--domain-filter",
            "x.ch",
            "--domain-filter",
            "y.ch",
        ]
    )

    assert settings.dry_run is True
    assert settings.kubeconfig == Path("/etc/kube/config")
    assert settings.registry == "noop"
    assert settings.request_timeout == 4.5
    assert settings.domain_filter == ["x.ch", "y.ch"]


@pytest.mark.parametrize(
    ("argv", "environment", "must_mention"),
    [
        (["serve", "--api-port", "70000"], {}, ["--api-port", "LANDB_API_PORT", "65535", "70000"]),
        (
            ["serve"],
            {"LANDB_REQUEST_TIMEOUT": "soon"},
            ["--request-timeout", "LANDB_REQUEST_TIMEOUT", "soon"],
        ),
        (["serve", "--dns-domain", "cern_ch"], {}, ["--dns-domain", "cern_ch"]),
        (["serve", "--log-level", "loud"], {}, ["--log-level", "loud"]),
        (
            ["serve"],
            {"LANDB_INGRESS_SELECTOR": "role in (ingress"},
            ["--ingress-selector", "LANDB_INGRESS_SELECTOR", "unbalanced"],
        ),
        (["serve", "--ingress-selector", " "], {}, ["--ingress-selector", "empty", "every node"]),
        (["serve", "--exclude-label", "not a key"], {}, ["--exclude-label", "label key"]),
        (
            ["serve"],
            {"LANDB_TXT_OWNER_ID": "my cluster"},
            ["--txt-owner-id", "LANDB_TXT_OWNER_ID", "white space"],
        ),
        (["serve", "--reserved-metadata-keys", "200"], {}, ["--reserved-metadata-keys", "127"]),
        (
            ["serve"],
            {"LANDB_NAME_POLICY": "team-a=a.b"},
            ["--name-policy", "LANDB_NAME_POLICY", "'a.b' is not a pattern"],
        ),
        (["serve", "--reserved-names", "a b"], {}, ["--reserved-names", "'a b' is not a pattern"]),
        (["serve", "--max-published-per-namespace", "0"], {}, ["--max-published-per-namespace", "1"]),
        (
            ["serve", "--os-cloud-conf", "/nonexistent/cloud.conf"],
            {},
            ["--os-cloud-conf", "LANDB_OS_CLOUD_CONF", "cannot read /nonexistent/cloud.conf"],
        ),
        (
            ["serve", "--kubeconfig", "/nonexistent/kubeconfig", "--api-port=0", "--health-port=0"],
            {},
            ["--kubeconfig", "LANDB_KUBECONFIG", "/nonexistent/kubeconfig"],
        ),
    ],
)
def test_an_invalid_setting_is_one_readable_paragraph_and_exit_2(
    argv: list[str],
    environment: dict[str, str],
    must_mention: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    with restored_logging():
        code = main(argv)

    error = capsys.readouterr().err
    assert code == 2
    assert error.startswith("landb-webhook serve: invalid settings: ")
    assert error.count("\n") == 1
    assert "Traceback" not in error
    for text in must_mention:
        assert text in error


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["serve"], "no OpenStack credentials: the OS_CLOUD / OS_* environment gives no auth_url"),
        (["status", "--os-cloud=prod"], "cloud 'prod' is not in clouds.yaml ({clouds_yaml})"),
    ],
)
def test_without_openstack_credentials_start_up_names_the_settings_and_exit_2(
    argv: list[str],
    problem: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [name for name in os.environ if name.startswith("OS_")]:
        monkeypatch.delenv(name)
    clouds_yaml = tmp_path / "clouds.yaml"
    clouds_yaml.write_text("clouds: {}\n")  # read before any clouds.yaml of the machine's
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds_yaml))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )

    with restored_logging():
        code = main(
            [
                *argv,
                f"--kubeconfig={kubeconfig}",
                "--api-port=0",
                "--health-host=127.0.0.1",
                "--health-port=0",
            ]
        )

    assert code == 2
    assert capsys.readouterr().err == (
        f"landb-webhook {argv[0]}: invalid settings: --os-cloud (LANDB_OS_CLOUD): "
        f"{problem.format(clouds_yaml=clouds_yaml)}; set LANDB_OS_CLOUD_CONF to the cluster's cloud.conf "
        "(Secret kube-system/cloud-config, key cloud.conf), or LANDB_OS_CLOUD to a cloud of clouds.yaml "
        "(./clouds.yaml, ~/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml, or the file "
        "OS_CLIENT_CONFIG_FILE names), or the OS_CLOUD or OS_AUTH_URL and other OS_* variables. "
        f"See 'landb-webhook {argv[0]} --help'.\n"
    )


def test_a_selector_that_does_not_parse_is_shown_once_with_the_syntax(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["status", "--ingress-selector", "role in ingress"])

    assert code == 2
    assert capsys.readouterr().err == (
        "landb-webhook status: invalid settings: --ingress-selector (LANDB_INGRESS_SELECTOR): label selector "
        "'role in ingress': cannot parse 'role in ingress'; a selector is comma-separated requirements, each "
        "key=value, key!=value, key in (a,b), key notin (a,b), key or !key; several separated by ';' match "
        "when any does. See 'landb-webhook status --help'.\n"
    )


def test_a_port_in_use_is_named_by_its_setting_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with restored_logging():
            code = main(["serve", "--api-port=0", "--health-host=127.0.0.1", f"--health-port={port}"])

    error = capsys.readouterr().err
    assert code == 2
    assert f"--health-port (LANDB_HEALTH_PORT): cannot listen on 127.0.0.1:{port}" in error
    assert error.count("\n") == 1


def test_an_unknown_landb_variable_is_named_with_a_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANDB_DRYRUN", "true")
    monkeypatch.setenv("LANDB_SOMETHING_ELSE", "1")
    monkeypatch.setenv("LANDB_DRY_RUN", "true")
    monkeypatch.setenv("LANDB_TOOLS_DIR", "/tmp/tools")  # the build scripts' own: not a setting, not a typo

    assert unknown_variables(os.environ) == [
        "LANDB_DRYRUN (did you mean LANDB_DRY_RUN?)",
        "LANDB_SOMETHING_ELSE",
    ]


@pytest.mark.parametrize(
    ("misspelled", "suggestion"),
    [
        ("landb_dryrun", " (did you mean LANDB_DRY_RUN?)"),
        ("Landb_Ingres_Selector", " (did you mean LANDB_INGRESS_SELECTOR?)"),
        ("landb_nothing_like_it", ""),
    ],
)
def test_an_unknown_variable_is_refused_in_any_case_as_the_settings_are_read_in_any_case(
    misspelled: str, suggestion: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pydantic-settings reads ``landb_dry_run`` as LANDB_DRY_RUN, so a misspelled lower-case name would be
    silently ignored beside lower-case names that are honoured."""
    monkeypatch.setenv("landb_dry_run", "true")  # honoured, so not unknown
    monkeypatch.setenv(misspelled, "true")

    assert Settings().dry_run is True
    assert unknown_variables(os.environ) == [misspelled + suggestion]
    assert main(["status"]) == 2
    assert f"unknown environment variable {misspelled}{suggestion}: no setting" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (main, ["serve", "--api-port=0", "--health-port=0"]),
        (main, ["status"]),
        (main, ["adopt", "--owner-id=c", "--all-unclaimed"]),
        (simulator_main, ["demo", "--api-port=0", "--health-port=0"]),
        (simulator_main, ["serve", "--state-dir=unused"]),
    ],
)
def test_an_unknown_landb_variable_stops_every_command_with_exit_2(
    command: Callable[[list[str]], int],
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LANDB_INGRES_SELECTOR", "role=ingress")
    program = "landb-webhook" if command is main else "landb-webhook-simulator"

    code = command(argv)

    assert code == 2
    assert capsys.readouterr().err == (
        f"{program} {argv[0]}: unknown environment variable LANDB_INGRES_SELECTOR (did you mean "
        "LANDB_INGRESS_SELECTOR?): no setting has that name, so it would be ignored. Rename or unset it "
        "('landb-webhook serve --help' lists every LANDB_* setting).\n"
    )


def test_an_unknown_flag_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--no-such-flag"])

    assert exited.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([])

    assert exited.value.code == 2


# --- serve as a process -------------------------------------------------------------------------------

# The composition root is replaced by the in-memory reference provider, so only the CLI, logging,
# listeners and shutdown are under test here.
SERVE_WITH_IN_MEMORY_PROVIDER = """
import sys, types
from landb_webhook.endpoint import DomainFilter
from support.memory_provider import InMemoryProvider

class Adapters:
    def close(self):
        print("adapters closed", flush=True)

def build_provider(settings, metrics):
    return InMemoryProvider(DomainFilter(include=tuple(settings.domain_filter))), Adapters()

composition_root = types.ModuleType("landb_webhook.wiring")
composition_root.build_provider = build_provider
composition_root.ask_openstack_once = lambda adapters: None
composition_root.start_dns_watch = lambda settings, adapters, metrics: None
sys.modules["landb_webhook.wiring"] = composition_root

from landb_webhook.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.fixture
def serve_process() -> Iterator[tuple[subprocess.Popen[str], queue.Queue[dict[str, object]]]]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SERVE_WITH_IN_MEMORY_PROVIDER,
            "serve",
            "--api-port=0",
            "--health-host=127.0.0.1",
            "--health-port=0",
            "--domain-filter=cern.ch,example.org",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "LANDB_LOG_FORMAT": "json",
            "LANDB_LOG_LEVEL": "info",
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),  # tests/, for support.memory_provider
        },
    )
    lines: queue.Queue[dict[str, object]] = queue.Queue()

    def read_log() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(json.loads(line))

    threading.Thread(target=read_log, daemon=True).start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(WAIT)


def next_event(lines: queue.Queue[dict[str, object]], event: str) -> dict[str, object]:
    while True:
        line = lines.get(timeout=WAIT)
        if line["event"] == event:
            return line


def test_serve_answers_then_stops_gracefully_on_sigterm(
    serve_process: tuple[subprocess.Popen[str], queue.Queue[dict[str, object]]],
) -> None:
    process, lines = serve_process
    serving = next_event(lines, "serving")

    negotiation = httpx.get(f"{serving['api']}/", timeout=WAIT)
    health = httpx.get(f"{serving['health']}/healthz", timeout=WAIT)
    process.send_signal(signal.SIGTERM)

    assert negotiation.json() == {"include": ["cern.ch", "example.org"]}
    assert health.status_code == 200
    assert process.wait(WAIT) == 0
    assert next_event(lines, "stopped")["level"] == "info"
    assert process.stdout is not None
    assert process.stdout.read() == "adapters closed\n"


def test_serve_exits_1_with_one_line_when_the_provider_cannot_be_built(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def build_provider(settings: Settings, metrics: object) -> None:
        raise LookupError("cloud 'prod' not found in clouds.yaml")

    composition_root = types.ModuleType("landb_webhook.wiring")
    composition_root.build_provider = build_provider  # type: ignore[attr-defined]
    composition_root.ask_openstack_once = lambda adapters: None  # type: ignore[attr-defined]
    composition_root.start_dns_watch = lambda *arguments: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "landb_webhook.wiring", composition_root)
    with restored_logging():
        code = main(["serve", "--api-port=0", "--health-host=127.0.0.1", "--health-port=0"])

    [line] = capsys.readouterr().err.splitlines()
    assert code == 1
    assert json.loads(line)["error"] == "LookupError: cloud 'prod' not found in clouds.yaml"


@pytest.mark.parametrize(
    ("api_host", "allowed", "warned"),
    [
        ("127.0.0.1", [], False),
        ("::1", [], False),
        ("0.0.0.0", [], True),
        ("::", [], True),
        ("0.0.0.0", ["hook"], False),
    ],
)
def test_an_api_listening_beyond_loopback_without_allowed_hosts_is_warned_about(
    api_host: str, allowed: list[str], warned: bool
) -> None:
    problem = api_host_problem(Settings(api_host=api_host, api_allowed_hosts=allowed))

    assert (problem is not None) == warned
    assert problem is None or "LANDB_API_ALLOWED_HOSTS" in problem


@pytest.mark.parametrize("command", ["status", "adopt"])
def test_a_one_shot_failure_before_the_secrets_are_known_prints_no_secret(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``status`` and ``adopt`` print a failure on stderr: one that comes before the credentials were read
    (and registered for redaction by value) still shows none of them, nor a control character."""
    password, key_data = "correct horse battery staple", "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t"
    token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJl"

    @contextlib.contextmanager
    def connected_adapters(settings: Settings, *, sync_timeout: float) -> Iterator[None]:
        raise RuntimeError(
            f"cannot load {{'password': '{password}', 'client-key-data': '{key_data}'}} bearer {token}\x1b[2J"
        )
        yield

    composition_root = types.ModuleType("landb_webhook.wiring")
    composition_root.connected_adapters = connected_adapters  # type: ignore[attr-defined]
    composition_root.ownership_namespace_hint = lambda settings, error: None  # type: ignore[attr-defined]
    composition_root.check_dns = None  # type: ignore[attr-defined]  # never reached
    monkeypatch.setitem(sys.modules, "landb_webhook.wiring", composition_root)
    argv = [command, "--owner-id=c", "--all-unclaimed"] if command == "adopt" else [command]
    with restored_logging():
        code = main(argv)

    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"landb-webhook {command}: RuntimeError: cannot load")
    assert [secret for secret in (*password.split(), key_data, token) if secret in err] == []
    assert "\x1b" not in err and err.count("\n") == 1


# -- unsafe settings: refused unless explicitly allowed (issue 36) -----------------------------------------


def composition_root_that_cannot_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """``landb_webhook.wiring`` replaced: building the provider fails (exit 1), so a test sees whether
    ``serve`` got that far."""

    def build_provider(settings: Settings, metrics: object) -> None:
        raise LookupError("not built in this test")

    composition_root = types.ModuleType("landb_webhook.wiring")
    composition_root.build_provider = build_provider  # type: ignore[attr-defined]
    composition_root.ask_openstack_once = None  # type: ignore[attr-defined]  # never reached
    composition_root.start_dns_watch = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "landb_webhook.wiring", composition_root)


@pytest.mark.parametrize("api_host", ["0.0.0.0", "::", "192.0.2.1"])
def test_an_api_host_beyond_loopback_is_refused_with_exit_2_unless_allowed(
    api_host: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The API has no authentication: beyond loopback any pod could drive it. The refusal comes before
    any socket is bound (192.0.2.1 is not even an address of this machine)."""
    composition_root_that_cannot_build(monkeypatch)
    ports = ["--api-port=0", "--health-host=127.0.0.1", "--health-port=0"]
    with restored_logging():
        refused = main(["serve", f"--api-host={api_host}", *ports])
    err = capsys.readouterr().err

    assert refused == 2
    assert "--api-host (LANDB_API_HOST)" in err and "LANDB_ALLOW_UNSAFE_API_HOST" in err
    if api_host != "192.0.2.1":  # an address of this machine: with the override, serve goes on
        with restored_logging():
            allowed = main(["serve", f"--api-host={api_host}", "--allow-unsafe-api-host", *ports])
        assert allowed == 1  # past the check: the provider (replaced here) could not be built


def unverified_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, kube: bool, cloud: bool
) -> Path:
    """A kubeconfig and a clouds.yaml on this machine, either with TLS verification off; the kubeconfig."""
    for name in [name for name in os.environ if name.startswith("OS_")]:
        monkeypatch.delenv(name)
    clouds_yaml = tmp_path / "clouds.yaml"
    auth = {"auth_url": "https://127.0.0.1:1/v3", "username": "u", "password": "p", "project_id": "x"}
    clouds_yaml.write_text(
        json.dumps(
            {"clouds": {"c": {"auth": auth, "region_name": "r", **({"verify": False} if cloud else {})}}}
        )
    )
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds_yaml))
    kubeconfig = tmp_path / "kubeconfig"
    cluster = {"server": "https://127.0.0.1:1", **({"insecure-skip-tls-verify": True} if kube else {})}
    kubeconfig.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "n"}}],
                "current-context": "c",
            }
        )
    )
    return kubeconfig


@pytest.mark.parametrize(("kube", "cloud"), [(True, False), (False, True)], ids=["kubernetes", "openstack"])
def test_tls_verification_off_is_refused_with_exit_2_unless_allowed(
    kube: bool,
    cloud: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubeconfig = unverified_configuration(tmp_path, monkeypatch, kube=kube, cloud=cloud)
    argv = ["status", f"--kubeconfig={kubeconfig}", "--os-cloud=c", "--upstream-timeout=1"]

    with restored_logging():
        refused = main(argv)
    err = capsys.readouterr().err
    with restored_logging():
        allowed = main([*argv, "--allow-unsafe-tls"])

    assert refused == 2
    assert "LANDB_ALLOW_UNSAFE_TLS" in err and "TLS verification" in err
    assert ("Kubernetes" in err) is kube and ("OpenStack" in err) is cloud
    assert allowed == 1  # past the check: nothing answers on 127.0.0.1:1


def test_verified_tls_needs_no_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = unverified_configuration(tmp_path, monkeypatch, kube=False, cloud=False)
    with restored_logging():
        code = main(["status", f"--kubeconfig={kubeconfig}", "--os-cloud=c", "--upstream-timeout=1"])

    assert code == 1  # nothing answers on 127.0.0.1:1
    assert "LANDB_ALLOW_UNSAFE_TLS" not in capsys.readouterr().err
