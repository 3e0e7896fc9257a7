"""The ``landb-webhook-simulator`` command: ``serve`` (the simulated APIs alone) and ``demo`` (the webhook
against them). No cloud needed."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from landb_simulator import landb_dns
from landb_simulator.demo import DEFAULT_DEMO_STATE_DIR, DEMO_SYNC_PERIOD, PROG, run_demo
from landb_simulator.landb_dns import LANDB_SYNC_PERIOD
from landb_simulator.landb_zone import OtherDevice
from landb_simulator.runner import run_simulator
from landb_webhook.embedding import (
    EXIT_INVALID_SETTINGS,
    configure_logging,
    describe_unknown_variables,
    unknown_variables,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Simulated Keystone, Nova and Kubernetes APIs on loopback, and the webhook's demo.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="run the simulated OpenStack and Kubernetes APIs",
        description="Run the simulated Keystone, Nova and Kubernetes APIs on 127.0.0.1 until interrupted, "
        "and write clouds.yaml and kubeconfig for them into the state directory.",
    )
    serve.add_argument("--state-dir", type=Path, required=True, help="where the client configs are written")
    serve.add_argument("--ingress-nodes", type=int, default=3, help="ingress nodes to create (default: 3)")
    serve.add_argument("--workers", type=int, default=1, help="worker nodes to create (default: 1)")
    serve.add_argument("--port", type=int, default=0, help="port to listen on (default: 0, any free port)")
    serve.add_argument(
        "--dns-port", type=int, default=0, help="LanDB's DNS server, UDP and TCP (default: 0, any free port)"
    )
    serve.add_argument(
        "--without-load-balancers",
        action="store_true",
        help="a cloud without Octavia: no load-balancer service in the Keystone catalog, none seeded",
    )
    serve.add_argument(
        "--dns-sync-period",
        type=_seconds,
        default=LANDB_SYNC_PERIOD,
        help=f"seconds between two publications in DNS (default: {LANDB_SYNC_PERIOD:g}, LanDB's)",
    )
    _other_device_flag(serve)

    demo = commands.add_parser(
        "demo",
        help="serve the webhook against an in-process simulator, and print what to try",
        description="Start the simulator with a 3-ingress-node cluster, serve the webhook against it on "
        "127.0.0.1, and print curl, kubectl and openstack commands to try.",
    )
    demo.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_DEMO_STATE_DIR,
        help="where clouds.yaml and kubeconfig are written; kept after exit (default: ./state)",
    )
    demo.add_argument("--api-port", type=int, default=8888, help="webhook API port (default: 8888)")
    demo.add_argument("--health-port", type=int, default=8080, help="health/metrics port (default: 8080)")
    demo.add_argument(
        "--dns-sync-period",
        type=_seconds,
        default=DEMO_SYNC_PERIOD,
        help=f"seconds between two publications in DNS (default: {DEMO_SYNC_PERIOD:g}; LanDB's: 900)",
    )
    _other_device_flag(demo)
    return parser


def _other_device_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--other-device",
        dest="other_devices",
        action="append",
        type=_other_device,
        default=[],
        metavar="NAME=IP:ALIASES",
        help="a LanDB device outside the cluster's project and the landb-alias value LanDB holds for it "
        "(repeatable): webfarm=10.9.9.9:indico--load-0-,www makes indico.cern.ch answer 10.9.9.9 and "
        "www.cern.ch a CNAME to webfarm.cern.ch, so the webhook refuses them (or takes them over, "
        "LANDB_TAKEOVER_NAMES)",
    )


def _other_device(text: str) -> OtherDevice:
    try:
        return OtherDevice.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The demo's webhook reads LANDB_* as serve does: a misspelled one stops it the same way.
    unknown = unknown_variables(os.environ)
    if unknown:
        print(f"{PROG} {args.command}: {describe_unknown_variables(unknown)}", file=sys.stderr)
        return EXIT_INVALID_SETTINGS
    configure_logging("info", "console")
    if args.command == "serve":
        logging.getLogger(landb_dns.__name__).setLevel(logging.INFO)  # each sync's changes: one line each
        run_simulator(
            args.state_dir,
            ingress_nodes=args.ingress_nodes,
            workers=args.workers,
            port=args.port,
            dns_port=args.dns_port,
            dns_sync_period=args.dns_sync_period,
            load_balancers=not args.without_load_balancers,
            other_devices=args.other_devices,
        )
        return 0
    return run_demo(
        args.state_dir,
        api_port=args.api_port,
        health_port=args.health_port,
        dns_sync_period=args.dns_sync_period,
        other_devices=args.other_devices,
    )


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
