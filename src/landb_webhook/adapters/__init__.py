"""The only code that knows openstacksdk and the kubernetes client: implementations of landb_webhook.ports."""

from landb_webhook.adapters.kubernetes import KubernetesNodeSource, api_client_for, server_id_from_provider_id
from landb_webhook.adapters.memory import InMemoryOwnershipStore
from landb_webhook.adapters.openstack import OpenStackServerStore
from landb_webhook.adapters.ownership import ConfigMapOwnershipStore, default_namespace
from landb_webhook.adapters.selector import InvalidSelector, LabelSelector

__all__ = [
    "ConfigMapOwnershipStore",
    "InMemoryOwnershipStore",
    "InvalidSelector",
    "KubernetesNodeSource",
    "LabelSelector",
    "OpenStackServerStore",
    "api_client_for",
    "default_namespace",
    "server_id_from_provider_id",
]
