"""The ``landb-webhook`` command: ``serve`` (production), and ``adopt`` and ``status`` for the operator.

``serve`` has one flag per field of :class:`~landb_webhook.config.Settings`, generated from the model
by pydantic-settings; each flag overrides the matching ``LANDB_*`` environment variable.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError
from pydantic_settings import CliSettingsSource, SettingsError

import landb_webhook
from landb_webhook.backends import UpstreamError
from landb_webhook.config import (
    ENV_PREFIX,
    PROG,
    SettingError,
    Settings,
    describe_unknown_variables,
    flag_and_variable,
    unknown_variables,
)
from landb_webhook.embedding import (
    EXIT_CANNOT_START,
    EXIT_INVALID_SETTINGS,
    EXIT_NEEDS_A_HUMAN,
    EXIT_READER_LEFT,
    run_webhook,
)
from landb_webhook.landb.names import InvalidName, label_for
from landb_webhook.logs import LogLevel, configure_logging, get_logger, printable, redact_every_form
from landb_webhook.provider.ownership.adopt import plan_adoption, store_claims
from landb_webhook.provider.read.txt_registry import InvalidOwnerId, txt_record_name, validate_owner_id
from landb_webhook.provider.status.reader import read_status
from landb_webhook.provider.status.values import ClusterStatus
from landb_webhook.report import ReadFrom, adoption_text, status_json, status_table
from landb_webhook.webhook.api import host_name, is_loopback
from landb_webhook.webhook.server import bind_listener

if TYPE_CHECKING:
    from landb_webhook.wiring import Adapters

ONE_SHOT_SYNC_TIMEOUT = 30.0
"""Seconds ``adopt`` and ``status`` wait for the node list."""

_log = get_logger(__name__)


def build_parser() -> tuple[argparse.ArgumentParser, CliSettingsSource[Settings]]:
    """The argument parser, and the pydantic-settings source that turns ``serve``'s flags into Settings."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="ExternalDNS webhook provider publishing cern.ch names as landb-alias metadata "
        "on a Kubernetes cluster's ingress nodes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {landb_webhook.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="serve the webhook API and the health/metrics listener",
        description=textwrap.fill(
            "Serve the webhook API for external-dns and /healthz, /readyz, /metrics. Every flag can also "
            f"be set with the {ENV_PREFIX}* environment variable shown; a flag wins over the variable."
        ),
        epilog=_environment_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    settings_flags = _settings_flags(serve)

    adopt = commands.add_parser(
        "adopt",
        help="claim aliases that already exist on the ingress nodes for external-dns",
        description=textwrap.fill(
            "Write the TXT ownership claims external-dns' txt registry would write for OWNER_ID, for "
            "aliases already on the cluster's ingress nodes (set by hand or by the landb-alias-controller). "
            "No server metadata is written: every alias keeps its N. Prints the namespace and ConfigMap it "
            "writes, what it claims and what it leaves, and why. Takes every setting of 'serve' (kubeconfig, "
            "OpenStack credentials, ownership store), as flags or LANDB_* variables, except one: only "
            f"--dry-run makes adopt write nothing; {ENV_PREFIX}DRY_RUN, the webhook's setting (the chart "
            "sets it), does not apply to adopt, which says so when it is set."
        ),
        usage=f"{PROG} adopt --owner-id OWNER_ID (--names NAMES | --all-unclaimed) [--dry-run] [settings]",
        epilog=_environment_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    adopt.add_argument(
        "--owner-id", required=True, help="external-dns' --txt-owner-id, which will own the claims"
    )
    which = adopt.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--names",
        type=_comma_list,
        help="comma-separated names to adopt (app or app.cern.ch)",
    )
    which.add_argument("--all-unclaimed", action="store_true", help="adopt every alias found without a claim")
    adopt.add_argument("--txt-prefix", default="", help="external-dns' --txt-prefix (default: none)")
    adopt.add_argument("--txt-suffix", default="", help="external-dns' --txt-suffix (default: none)")
    _settings_flags(adopt)
    _flag(adopt, "dry_run").help = (
        f"print what would be claimed and write nothing; the only switch: {ENV_PREFIX}DRY_RUN does not "
        "apply to adopt"
    )

    status = commands.add_parser(
        "status",
        help="print every alias of the cluster and what needs a human (read-only)",
        description=textwrap.fill(
            "Read the cluster's nodes, their Nova servers and the ownership claims, write nothing, and "
            "print per name its carriers with their N and who claims it, then what needs a human. "
            "Takes every setting of 'serve'."
        )
        + "\n\nPrints first what it read: the ingress selector, the registry, the namespace and ConfigMap "
        "of the claims (and where the namespace came from), the writer Lease's holder."
        + f"\n\nExit codes: 0 nothing needs a human; {EXIT_NEEDS_A_HUMAN} something does (listed under "
        f"'Needs a human' / needs_human); {EXIT_CANNOT_START} the cluster or the cloud could not be read; "
        f"{EXIT_INVALID_SETTINGS} invalid settings or arguments.",
        epilog=_environment_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    status.usage = f"{PROG} status [--output {{table,json}}] [settings]"
    status.add_argument(
        "--output", choices=("table", "json"), default="table", help="table (default) or json"
    )
    _settings_flags(status)

    return parser, settings_flags


def _settings_flags(command: argparse.ArgumentParser) -> CliSettingsSource[Settings]:
    """Give ``command`` one flag per setting, and remember the source that reads them back."""
    flags: CliSettingsSource[Settings] = CliSettingsSource(
        Settings,
        root_parser=command,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_show_env_vars=True,
    )
    command.set_defaults(settings_flags=flags)
    return flags


def _flag(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    return next(action for action in parser._actions if action.dest == dest)


def _comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _environment_epilog() -> str:
    """The current value of every setting the environment changes, since the list above shows defaults."""
    fields = {ENV_PREFIX + field.upper() for field in Settings.model_fields}
    present = [f"  {name}={value}" for name, value in sorted(os.environ.items()) if name.upper() in fields]
    text = (
        "Current values: the defaults above, except these set in the environment now (a flag overrides "
        "them):\n" + "\n".join(present)
        if present
        else f"Current values: the defaults above (no {ENV_PREFIX}* variable is set)."
    )
    unknown = unknown_variables(os.environ)
    if unknown:
        text += "\n\nUnknown, so start-up stops with exit 2:\n" + "\n".join(f"  {name}" for name in unknown)
    return text


def load_settings(args: argparse.Namespace, settings_flags: CliSettingsSource[Settings]) -> Settings:
    """Defaults, overridden by ``LANDB_*`` variables, overridden by flags. Raises ValidationError."""
    return Settings(_cli_settings_source=settings_flags(parsed_args=args))


def describe_invalid_settings(error: ValidationError | SettingsError, command: str = "serve") -> str:
    """One paragraph naming each bad setting by its flag and variable, what is wrong and the value given."""
    if isinstance(error, SettingsError):
        return f"invalid settings: {error}."
    problems = []
    for detail in error.errors(include_url=False):
        field = str(detail["loc"][0]) if detail["loc"] else ""
        where = flag_and_variable(field) if field else "settings"
        message = str(detail["msg"]).removeprefix("Value error, ")
        given = repr(detail["input"])
        problems.append(f"{where}: {message}" + ("" if given in message else f" (got {given})"))
    return f"invalid settings: {'; '.join(problems)}. See '{PROG} {command} --help'."


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = build_parser()
    args = parser.parse_args(argv)
    unknown = unknown_variables(os.environ)
    if unknown:
        print(f"{PROG} {args.command}: {describe_unknown_variables(unknown)}", file=sys.stderr)
        return EXIT_INVALID_SETTINGS
    try:
        settings = load_settings(args, args.settings_flags)
    except (ValidationError, SettingsError) as error:
        print(f"{PROG} {args.command}: {describe_invalid_settings(error, args.command)}", file=sys.stderr)
        return EXIT_INVALID_SETTINGS
    try:
        if args.command == "adopt":
            return adopt(settings, args)
        if args.command == "status":
            return status(settings, output=args.output)
        return serve(settings)
    except SettingError as error:
        _say_on_stderr(
            f"{PROG} {args.command}: invalid settings: {error}. See '{PROG} {args.command} --help'."
        )
        return EXIT_INVALID_SETTINGS


def _say_on_stderr(line: str) -> None:
    """A failure on stderr, as a log line would show it: secrets redacted (every form, as those of a
    failure before the credentials were read and registered have no other protection), printable only."""
    print(printable(redact_every_form(line)), file=sys.stderr)


def serve(settings: Settings) -> int:
    """Bind both listeners first, then build the provider and serve until SIGTERM/SIGINT.

    Raises SettingError for a setting that cannot work here (a port in use, an unusable file).
    """
    configure_logging(settings.log_level, settings.log_format)
    if not is_loopback(host_name(settings.api_host)) and not settings.allow_unsafe_api_host:
        raise SettingError(
            "api_host",
            f"{settings.api_host} is beyond loopback: the webhook API has no authentication, so any pod "
            "reaching it could publish and remove names. external-dns calls it from the same pod "
            f"(http://localhost:{settings.api_port}); set {flag_and_variable('allow_unsafe_api_host')} to "
            "true to listen there anyway",
        )
    if (problem := api_host_problem(settings)) is not None:
        _log.warning(problem)
    api_listener = _listen("api_port", settings.api_host, settings.api_port)
    try:
        health_listener = _listen("health_port", settings.health_host, settings.health_port)
    except SettingError:
        api_listener.close()
        raise
    return run_webhook(settings, api_listener, health_listener)


def api_host_problem(settings: Settings) -> str | None:
    """Why external-dns might be refused (421): the API listens beyond loopback, yet answers loopback
    Host names only."""
    if is_loopback(host_name(settings.api_host)) or settings.api_allowed_hosts:
        return None
    return (
        f"the webhook API listens on {settings.api_host} but answers only loopback Host names: if "
        f"external-dns calls it by another name, list that name in {flag_and_variable('api_allowed_hosts')}"
    )


def _listen(port_field: str, host: str, port: int) -> socket.socket:
    try:
        return bind_listener(host, port)
    except OSError as error:
        raise SettingError(port_field, f"cannot listen on {host}:{port}: {error.strerror or error}") from None


def adopt(settings: Settings, args: argparse.Namespace) -> int:
    """Claim the existing aliases ``args`` names for ``args.owner_id``; print what was claimed and left."""
    problem = _adoption_refusal(settings, args)
    if problem is not None:
        print(f"{PROG} adopt: {problem}", file=sys.stderr)
        return EXIT_INVALID_SETTINGS
    labels = None if args.all_unclaimed else [_label(name, settings.dns_domain) for name in args.names]
    dry_run = bool(getattr(args, "dry_run", False))  # the flag only: the setting is the webhook's
    if settings.dry_run and not hasattr(args, "dry_run"):
        print(
            f"{PROG} adopt: {ENV_PREFIX}DRY_RUN=true is the webhook's setting and does not apply to adopt: "
            "the claims below are written. Pass --dry-run to see them first.",
            file=sys.stderr,
        )

    def run(adapters: Adapters) -> int:
        found = _read_status(settings, adapters)
        plan = plan_adoption(
            found,
            owner_id=args.owner_id,
            labels=labels,
            txt_prefix=args.txt_prefix,
            txt_suffix=args.txt_suffix,
            domain=settings.dns_domain,
            ingress_selector=settings.ingress_selector,
        )
        stored = None if dry_run else len(store_claims(adapters.ownership, plan))
        print(adoption_text(plan, _read_from(settings, lease=False), dry_run=dry_run, stored=stored))
        return 0

    return _one_shot("adopt", settings, run)


def _adoption_refusal(settings: Settings, args: argparse.Namespace) -> str | None:
    """Why these arguments cannot adopt anything, or None."""
    if not settings.external_dns_registry.has_owners:
        return "claims are TXT records, which registry noop ignores: adopt needs LANDB_REGISTRY=txt"
    if settings.ownership_store != "configmap":
        return "the memory ownership store forgets claims when this command exits: use configmap"
    try:
        validate_owner_id(args.owner_id)
        txt_record_name(f"probe.{settings.dns_domain}", "A", prefix=args.txt_prefix, suffix=args.txt_suffix)
        for name in args.names or ():
            _label(name, settings.dns_domain)
    except (InvalidOwnerId, InvalidName, ValueError) as error:
        return str(error)
    if args.names is not None and not args.names:
        return "--names lists no name"
    return None


def _label(name: str, domain: str) -> str:
    """``app`` or ``app.cern.ch`` -> ``app``; raises InvalidName."""
    return label_for(name if "." in name.strip(".") else f"{name}.{domain}", domain)


def status(settings: Settings, *, output: str) -> int:
    """Print the status of every alias; exit non-zero when something needs a human."""

    from landb_webhook.wiring import check_dns  # noqa: PLC0415 (imports every adapter)

    def run(adapters: Adapters) -> int:
        found = _read_status(settings, adapters, departed=True)
        read_from = _read_from(settings, lease=True, adapters=adapters)
        dns = check_dns(settings, adapters.state, found)
        print(status_json(found, read_from, dns) if output == "json" else status_table(found, read_from, dns))
        return EXIT_NEEDS_A_HUMAN if found.attention() else 0

    return _one_shot("status", settings, run)


def _read_status(settings: Settings, adapters: Adapters, *, departed: bool = False) -> ClusterStatus:
    """``departed``: include the servers of nodes that left, as the webhook remembers them (``status``
    shows them; adoption plans from the cluster's own nodes only)."""
    from landb_webhook.wiring import health_policy  # noqa: PLC0415 (imports every adapter)

    return read_status(
        adapters.ports(),
        domain=settings.dns_domain,
        health=health_policy(settings),
        registry=settings.external_dns_registry,
        departed_servers=departed,
    )


def _read_from(settings: Settings, *, lease: bool, adapters: Adapters | None = None) -> ReadFrom:
    """Where the claims are read and written, (``lease``) who holds the writer Lease now, and (``adapters``,
    once read) what the load balancers were read from."""
    from landb_webhook.wiring import (  # noqa: PLC0415 (imports every adapter)
        lease_holder,
        load_balancer_service,
        ownership_namespace,
    )

    namespace = ownership_namespace(settings)
    holder = "not read"
    if not settings.leader_election:
        holder = f"off ({ENV_PREFIX}LEADER_ELECTION=false)"
    elif lease:
        holder = lease_holder(settings)
    return ReadFrom(
        ingress_selector=settings.ingress_selector,
        registry=settings.registry,
        namespace=namespace.name,
        namespace_source=namespace.source,
        configmap=settings.ownership_configmap,
        writer_lease=holder,
        load_balancers="on" if adapters is None else load_balancer_service(settings, adapters.load_balancers),
    )


def _one_shot(command: str, settings: Settings, run: Callable[[Adapters], int]) -> int:
    """Run ``run`` on freshly connected adapters; any failure is one line on stderr and exit code 1
    (with a traceback in the log at debug level)."""
    from landb_webhook.wiring import connected_adapters, ownership_namespace_hint  # noqa: PLC0415 (imports every adapter)

    configure_logging(_quieter(settings.log_level), settings.log_format)
    try:
        with connected_adapters(settings, sync_timeout=ONE_SHOT_SYNC_TIMEOUT) as adapters:
            return run(adapters)
    except SettingError as error:
        _say_on_stderr(f"{PROG} {command}: invalid settings: {error}. See '{PROG} {command} --help'.")
        return EXIT_INVALID_SETTINGS
    except BrokenPipeError:  # the reader left (status | head): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return EXIT_READER_LEFT
    except Exception as error:
        if isinstance(error, UpstreamError):
            hint = ownership_namespace_hint(settings, error)
            _say_on_stderr(
                f"{PROG} {command}: cannot talk to the cluster or the cloud: {error}"
                + (f"; {hint}" if hint else "")
            )
        else:  # an unknown cloud, an unexpected failure
            _say_on_stderr(f"{PROG} {command}: {type(error).__name__}: {error}")
        _log.debug("traceback", exc_info=True)
        return EXIT_CANNOT_START


def _quieter(level: LogLevel) -> LogLevel:
    """A one-shot command prints its result on stdout: its log shows warnings and worse, unless debug."""
    return level if level in ("debug", "warning", "error") else "warning"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
