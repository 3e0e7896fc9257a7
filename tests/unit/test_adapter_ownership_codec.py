"""Ownership records: the ConfigMap key they live under and their exact JSON round trip."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from landb_webhook.adapters.kubeclient import current_namespace
from landb_webhook.adapters.memory import InMemoryOwnershipStore
from landb_webhook.adapters.ownership import data_key, decode_record, encode_record
from landb_webhook.endpoint import Endpoint

CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # Kubernetes' IsConfigMapKey

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
names = st.one_of(
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}\.){1,3}cern\.ch", fullmatch=True),
    st.from_regex(r"(\*|_sip)\.[a-z]{1,8}\.cern\.ch", fullmatch=True),
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=300),
)
records = st.builds(
    Endpoint,
    dns_name=names,
    record_type=st.sampled_from(["TXT", "A", "CNAME"]),
    targets=st.lists(text, max_size=3).map(tuple),
    set_identifier=st.one_of(st.just(""), text),
    record_ttl=st.integers(min_value=0, max_value=86400),
    labels=st.dictionaries(text, text, max_size=3).map(lambda d: tuple(d.items())),
    provider_specific=st.lists(st.tuples(text, text), max_size=2).map(tuple),
)


@given(records)
def test_every_record_round_trips_exactly(record: Endpoint) -> None:
    assert decode_record(encode_record(record)) == record


@given(records)
def test_the_data_key_is_always_a_valid_configmap_key(record: Endpoint) -> None:
    key = data_key(record)
    assert CONFIGMAP_KEY.fullmatch(key)
    assert len(key) <= 253
    assert not key.startswith("..")


@given(records, records)
def test_distinct_identities_get_distinct_keys(first: Endpoint, second: Endpoint) -> None:
    same_identity = (first.dns_name.lower(), first.set_identifier) == (
        second.dns_name.lower(),
        second.set_identifier,
    )
    assert (data_key(first) == data_key(second)) is same_identity


def test_the_usual_txt_record_keeps_a_readable_key_and_its_value_verbatim() -> None:
    value = '"heritage=external-dns,external-dns/owner=default,external-dns/resource=ingress/ns/app"'
    record = Endpoint("a-App.cern.ch", "TXT", (value,), labels=(("ownedRecord", "app.cern.ch"),))
    assert data_key(record) == "a-app.cern.ch"
    assert decode_record(encode_record(record)).targets[0] == value


def test_a_set_identifier_or_an_unsafe_name_gets_a_hashed_key() -> None:
    hashed = re.compile(r"(?P<readable>.+)_[0-9a-f]{16}")
    blue = hashed.fullmatch(data_key(Endpoint("a-app.cern.ch", "TXT", set_identifier="blue")))
    wildcard = hashed.fullmatch(data_key(Endpoint("a-*.app.cern.ch", "TXT")))
    assert blue and blue["readable"] == "a-app.cern.ch"
    assert wildcard and wildcard["readable"] == "a--.app.cern.ch"


def test_in_memory_store_upserts_deletes_and_prefers_the_upsert_of_an_update() -> None:
    old = Endpoint("a-app.cern.ch", "TXT", ('"owner=a"',))
    new = Endpoint("A-APP.cern.ch", "TXT", ('"owner=b"',))
    other = Endpoint("a-other.cern.ch", "TXT", ('"owner=a"',))
    store = InMemoryOwnershipStore([old, other])
    store.apply([new], [old, Endpoint("a-missing.cern.ch", "TXT")])
    assert store.records() == [new, other]
    store.apply([], [other])
    assert store.records() == [new]


def test_in_memory_store_keeps_every_concurrent_write() -> None:
    store = InMemoryOwnershipStore()
    barrier = threading.Barrier(8)

    def writer(worker: int) -> None:
        barrier.wait(timeout=5)
        for i in range(50):
            store.apply([Endpoint(f"a-{worker}-{i}.cern.ch", "TXT", ('"x"',))], [])

    threads = [threading.Thread(target=writer, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(store.records()) == 400


def test_the_namespace_defaults_to_the_pods_own_in_a_pod(tmp_path: Path) -> None:
    namespace_file = tmp_path / "namespace"
    namespace_file.write_text("external-dns\n")

    found = current_namespace(None, service_account_file=namespace_file)

    assert (found.name, found.source) == (
        "external-dns",
        f"the service account's namespace ({namespace_file})",
    )


def write_kubeconfig(path: Path, namespace: str | None) -> Path:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "ops", "context": context}],
                "current-context": "ops",
            }
        )
    )
    return path


def test_from_a_workstation_the_namespace_is_the_kubeconfig_contexts_as_kubectl_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", "external-dns")
    no_pod = tmp_path / "missing"

    explicit = current_namespace(kubeconfig, service_account_file=no_pod)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    from_environment = current_namespace(None, service_account_file=no_pod)

    assert explicit == from_environment
    assert (explicit.name, explicit.source) == (
        "external-dns",
        f"the namespace of kubeconfig context 'ops' ({kubeconfig})",
    )


def test_without_a_namespace_anywhere_it_is_default_and_says_why(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config", None)

    found = current_namespace(kubeconfig, service_account_file=tmp_path / "missing")

    assert (found.name, found.source) == ("default", "default: kubeconfig context 'ops' names no namespace")
