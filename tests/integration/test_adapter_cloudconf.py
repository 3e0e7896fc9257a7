"""A CERN cluster's cloud.conf is enough to reach Nova: trusts and application credentials."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from landb_simulator import ClientConfig, Simulator, seed_cluster
from landb_webhook.adapters.cloudconf import CloudConfError, connection_options
from landb_webhook.adapters.nova import OpenStackServerStore
from landb_webhook.adapters.openstack import OpenStackSession
from landb_webhook.backends import Node, UpstreamError
from landb_webhook.cli import EXIT_INVALID_SETTINGS, main
from support.default_options import openstack_options, retry_policy
from support.logging_state import restored_logging


def cloud_conf_from(config: ClientConfig, cloud: str, path: Path) -> Path:
    """Write the [Global] section a Magnum cluster would carry for the same credentials."""
    auth = yaml.safe_load(config.clouds_yaml.read_text())["clouds"][cloud]["auth"]
    names = {
        "auth_url": "auth-url",
        "user_id": "user-id",
        "password": "password",
        "trust_id": "trust-id",
        "application_credential_id": "application-credential-id",
        "application_credential_secret": "application-credential-secret",
    }
    lines = ["[Global]", *(f'{names[k]}="{v}"' for k, v in auth.items()), "region=cern"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("cloud", ["simulator-trust", "simulator-appcred"])
def test_servers_are_read_with_the_credentials_of_a_cloud_conf(
    simulator: Simulator, tmp_path: Path, cloud: str
) -> None:
    config = simulator.write_client_config(tmp_path)
    names = seed_cluster(simulator.state, ingress_nodes=2, workers=0)
    store = OpenStackServerStore(
        OpenStackSession(
            cloud_conf=cloud_conf_from(config, cloud, tmp_path / "cloud.conf"), options=openstack_options()
        )
    )
    try:
        found = store.servers_for([Node(name, None, (), True) for name in names])
    finally:
        store.close()
    assert sorted(found) == sorted(names)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[Other]\nauth-url=x\n", r"no \[Global\] section"),
        ("[Global]\npassword=hunter2-secret\n", "no auth-url"),
        ("[Global]\nauth-url=https://keystone.cern.ch/v3\nuser-id=u\n", "neither a password"),
        (
            "not an ini file at all hunter2-secret",
            r"is not a cloud.conf: line 1 comes before any \[section\] header; "
            r"the file starts with \[Global\]",
        ),
        ("[Global]\npassword=hunter2-secret\npassword=hunter2-secret\n", r"\[Global\] password is set twice"),
        ("[Global]\nauth-url=x\nhunter2-secret\n", "line 3 is neither `key = value` nor a"),
    ],
)
def test_an_unusable_cloud_conf_says_why_without_quoting_it(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "cloud.conf"
    path.write_text(text)
    with pytest.raises(CloudConfError, match=why) as raised:
        connection_options(path)
    assert "hunter2" not in str(raised.value)


def test_a_missing_cloud_conf_says_where_it_comes_from(tmp_path: Path) -> None:
    path = tmp_path / "cloud.conf"

    with pytest.raises(CloudConfError) as raised:
        connection_options(path)

    assert str(raised.value) == (
        f"cannot read {path}: No such file or directory; mount the cluster's cloud.conf there (Secret "
        "kube-system/cloud-config, key cloud.conf), or unset it to use clouds.yaml"
    )


def test_a_trust_becomes_a_v3password_login_and_keeps_the_ca_file(tmp_path: Path) -> None:
    ca_file = tmp_path / "ca-bundle.crt"
    ca_file.write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "cloud.conf"
    path.write_text(
        "[Global]\nauth-url=https://keystone.cern.ch/v3\nuser-id=u1\npassword=p\ntrust-id=t1\n"
        f"region=cern\nca-file={ca_file}\n"
    )
    options = connection_options(path)
    assert options["auth_type"] == "v3password"
    assert options["auth"] == {
        "auth_url": "https://keystone.cern.ch/v3",
        "user_id": "u1",
        "password": "p",
        "trust_id": "t1",
    }
    assert options["region_name"] == "cern" and options["cacert"] == str(ca_file)


def test_values_are_read_as_the_cloud_provider_reads_them(tmp_path: Path) -> None:
    """Quoted or not, spaces around '=', escapes and trailing comments: gcfg's syntax, key by key."""
    ca_file = tmp_path / "ca bundle.crt"
    ca_file.write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "cloud.conf"
    path.write_text(
        "[Global]\n"
        'auth-url = "https://keystone.cern.ch/v3"\n'
        'application-credential-id = "0123abcd" ; the cluster\'s credential\n'
        'application-credential-secret = "s3cr;et\\"quoted\\" # not a comment"\n'
        'region = "cern"\n'
        f'ca-file = "{ca_file}"\n'
        "[LoadBalancer]\nuse-octavia = true\n"
    )
    options = connection_options(path)
    assert options["auth_type"] == "v3applicationcredential"
    assert options["auth"] == {
        "auth_url": "https://keystone.cern.ch/v3",
        "application_credential_id": "0123abcd",
        "application_credential_secret": 's3cr;et"quoted" # not a comment',
    }
    assert (options["region_name"], options["cacert"]) == ("cern", str(ca_file))


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('trust-id = "hunter2-secret', "unterminated"),
        ('trust-id = "hunter2\\q"', "unknown escape"),
        ("ca-file = /nonexistent/ca-bundle.crt", "not a readable file"),
    ],
)
def test_a_malformed_value_is_refused_by_key_without_quoting_it(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "cloud.conf"
    path.write_text(f"[Global]\nauth-url=https://keystone.cern.ch/v3\nuser-id=u\npassword=p\n{line}\n")
    with pytest.raises(CloudConfError, match=why) as raised:
        connection_options(path)
    assert "hunter2" not in str(raised.value)


def tls_cloud_conf(config: ClientConfig, https_url: str, path: Path, ca_file: Path | None) -> Path:
    """The trust cloud.conf, pointed at the simulator's HTTPS port, quoted as Magnum may write it."""
    auth = yaml.safe_load(config.clouds_yaml.read_text())["clouds"]["simulator-trust"]["auth"]
    lines = [
        "[Global]",
        f'auth-url = "{https_url}/identity/v3"',
        f'user-id = "{auth["user_id"]}"',
        f'password = "{auth["password"]}"',
        f'trust-id = "{auth["trust_id"]}"',
        'region = "cern"',
    ]
    if ca_file is not None:
        lines.append(f'ca-file = "{ca_file}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_ca_file_verifies_keystone_and_nova_over_tls(simulator: Simulator, tmp_path: Path) -> None:
    config = simulator.write_client_config(tmp_path)
    names = seed_cluster(simulator.state, ingress_nodes=1, workers=0)
    nodes = [Node(name, None, (), True) for name in names]

    trusted = OpenStackServerStore(
        OpenStackSession(
            cloud_conf=tls_cloud_conf(config, simulator.https_url, tmp_path / "ca.conf", config.ca_file),
            options=openstack_options(),
        )
    )
    untrusted = OpenStackServerStore(
        OpenStackSession(
            cloud_conf=tls_cloud_conf(config, simulator.https_url, tmp_path / "no-ca.conf", None),
            # a TLS refusal is not worth retrying here
            options=openstack_options(retry=retry_policy(transient_retries=0)),
        )
    )
    try:
        assert sorted(trusted.servers_for(nodes)) == sorted(names)
        with pytest.raises(UpstreamError) as raised:
            untrusted.servers_for(nodes)
    finally:
        trusted.close()
        untrusted.close()
    assert raised.value.upstream == "keystone" and "TLS" in raised.value.reason


def test_an_explicit_ca_bundle_wins_over_a_ca_file_absent_from_this_machine(tmp_path: Path) -> None:
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "cloud.conf"
    path.write_text(
        "[Global]\nauth-url=https://keystone.cern.ch/v3\nuser-id=u\npassword=p\n"
        "ca-file=/nonexistent/etc/kubernetes/ca-bundle.crt\n"
    )

    assert connection_options(path, cacert=bundle)["cacert"] == str(bundle)
    with pytest.raises(CloudConfError, match="or set LANDB_OS_CACERT to a CA bundle on this machine"):
        connection_options(path)


def test_status_from_a_workstation_runs_on_the_cluster_s_cloud_conf_with_its_own_ca_bundle(
    simulator: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cloud.conf names the CA bundle where Magnum puts it on the nodes; this machine has none there,
    and LANDB_OS_CACERT names the one it has: status reads the cloud over TLS with it (it stopped with exit
    2 before)."""
    for name in [name for name in os.environ if name.startswith("LANDB_")]:
        monkeypatch.delenv(name)
    config = simulator.write_client_config(tmp_path)
    assert config.ca_file is not None
    seed_cluster(simulator.state, ingress_nodes=1, workers=0)
    on_the_nodes = tmp_path / "node" / "etc" / "kubernetes" / "ca-bundle.crt"  # not on this machine
    cloud_conf = tls_cloud_conf(config, simulator.https_url, tmp_path / "cloud.conf", on_the_nodes)
    monkeypatch.setenv("LANDB_OS_CACERT", str(config.ca_file))
    flags = [f"--os-cloud-conf={cloud_conf}", f"--kubeconfig={config.kubeconfig}"]

    with restored_logging():
        code = main(["status", *flags, "--ownership-namespace=default", "--no-dns-watch"])
    captured = capsys.readouterr()

    assert code == 0, captured.err
    assert "Nothing needs a human." in captured.out.splitlines()
    assert [call.path for call in simulator.state.api_calls("nova")] != []

    monkeypatch.setenv("LANDB_OS_CACERT", str(tmp_path / "missing.crt"))
    with restored_logging():
        code = main(["status", *flags, "--ownership-namespace=default", "--no-dns-watch"])

    assert code == EXIT_INVALID_SETTINGS
    assert f"--os-cacert (LANDB_OS_CACERT): {tmp_path / 'missing.crt'} is not a readable file" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("cloud", "secret"),
    [("simulator-trust", "password"), ("simulator-appcred", "application_credential_secret")],
)
def test_the_secret_of_a_cloud_conf_or_a_clouds_yaml_is_known_for_redaction_without_a_remote_call(
    simulator: Simulator, tmp_path: Path, cloud: str, secret: str
) -> None:
    config = simulator.write_client_config(tmp_path)
    expected = yaml.safe_load(config.clouds_yaml.read_text())["clouds"][cloud]["auth"][secret]
    from_conf = OpenStackSession(
        cloud_conf=cloud_conf_from(config, cloud, tmp_path / "cloud.conf"), options=openstack_options()
    )
    from_yaml = OpenStackSession(cloud, clouds_yaml=config.clouds_yaml, options=openstack_options())
    assert from_conf.secret_values() == [expected]
    assert from_yaml.secret_values() == [expected]
    assert simulator.state.api_calls() == []
