"""Simulated Keystone v3, Nova v2.1, Octavia v2 and Kubernetes core APIs on loopback, for tests,
benchmarks and demo, and external-dns' planner (:mod:`landb_simulator.external_dns`) to drive the webhook
as its loop does.

Real clients (openstacksdk, the openstack CLI, the kubernetes Python client, kubectl) talk to it unchanged:

    with Simulator() as sim:
        seed_cluster(sim.state)
        config = sim.write_client_config(tmp_path)   # clouds.yaml (cloud "simulator") + kubeconfig
"""

from landb_simulator.runner import run_simulator
from landb_simulator.seed import seed_cluster, seed_gateway_route, seed_load_balancer_service
from landb_simulator.server import ClientConfig, Simulator
from landb_simulator.state import (
    ApiCall,
    FaultHandle,
    MetadataChange,
    NovaError,
    ServerInfo,
    SimulatorState,
)

__all__ = [
    "ApiCall",
    "ClientConfig",
    "FaultHandle",
    "MetadataChange",
    "NovaError",
    "ServerInfo",
    "Simulator",
    "SimulatorState",
    "run_simulator",
    "seed_cluster",
    "seed_gateway_route",
    "seed_load_balancer_service",
]
