"""Credentials from a CERN Magnum cluster's ``cloud.conf``, so the webhook can reuse them as they are.

Every CERN Magnum cluster carries its OpenStack credentials in Secret ``kube-system/cloud-config``, key
``cloud.conf``: the INI file of the OpenStack cloud provider, whose ``[Global]`` section holds a trust
(``user-id``, ``password``, ``trust-id``) or an application credential. Mounting that file and pointing
``LANDB_OS_CLOUD_CONF`` at it is the shortest way in; a ``clouds.yaml`` works as well.

The cloud provider reads the file with the gcfg syntax (git-config style), and Magnum and operators
write both ``region=cern`` and ``region = "cern"``: values are read the way gcfg reads them (double
quotes removed, ``\\"`` and ``\\\\`` escapes honoured, ``;`` or ``#`` outside quotes starts a comment).
``ca-file`` names the CA bundle Keystone's and Nova's certificates are verified with, unless a CA bundle is
given explicitly (``LANDB_OS_CACERT``): an explicit setting wins over the file's, whose ``ca-file`` is then
neither read nor checked (a cluster's cloud.conf names a path on its nodes, absent from a workstation).

Without a cloud.conf, openstacksdk reads clouds.yaml and the ``OS_*`` environment;
:func:`clouds_yaml_problem` asks it, before start-up, whether that gives credentials at all.
"""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any

import openstack.config
from keystoneauth1.exceptions import MissingRequiredOptions
from openstack.exceptions import ConfigException

WHERE_CREDENTIALS_COME_FROM = (
    "set LANDB_OS_CLOUD_CONF to the cluster's cloud.conf (Secret kube-system/cloud-config, key cloud.conf), "
    "or LANDB_OS_CLOUD to a cloud of clouds.yaml (./clouds.yaml, ~/.config/openstack/clouds.yaml, "
    "/etc/openstack/clouds.yaml, or the file OS_CLIENT_CONFIG_FILE names), or the OS_CLOUD or OS_AUTH_URL "
    "and other OS_* variables"
)

# cloud.conf key -> keystoneauth auth option (the cloud provider's names for the same things)
_AUTH_KEYS = {
    "auth-url": "auth_url",
    "username": "username",
    "user-id": "user_id",
    "password": "password",
    "trust-id": "trust_id",
    "tenant-id": "project_id",
    "project-id": "project_id",
    "tenant-name": "project_name",
    "project-name": "project_name",
    "domain-id": "user_domain_id",
    "domain-name": "user_domain_name",
    "user-domain-id": "user_domain_id",
    "user-domain-name": "user_domain_name",
    "tenant-domain-id": "project_domain_id",
    "tenant-domain-name": "project_domain_name",
    "project-domain-id": "project_domain_id",
    "project-domain-name": "project_domain_name",
    "application-credential-id": "application_credential_id",
    "application-credential-name": "application_credential_name",
    "application-credential-secret": "application_credential_secret",
}
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "b": "\b"}


class CloudConfError(ValueError):
    """The file cannot be used; the message says which file and why (never a value from it)."""


def clouds_yaml_problem(cloud: str | None) -> str | None:
    """Why clouds.yaml and the ``OS_*`` environment give no credentials for ``cloud`` (None: the
    OS_CLOUD / OS_* environment), or None when they do. Reads local files only."""
    try:
        loader = openstack.config.OpenStackConfig()
        loader.get_one(cloud=cloud)
    except MissingRequiredOptions:
        found = f"cloud {cloud!r}" if cloud else "the OS_CLOUD / OS_* environment"
        return f"no OpenStack credentials: {found} gives no auth_url; {WHERE_CREDENTIALS_COME_FROM}"
    except ConfigException:
        read = loader.config_filename or "no clouds.yaml was found"
        return f"cloud {cloud!r} is not in clouds.yaml ({read}); {WHERE_CREDENTIALS_COME_FROM}"
    return None


def connection_options(path: Path, *, cacert: Path | None = None) -> dict[str, Any]:
    """Keyword arguments for ``openstack.connect`` from a cloud.conf file; ``cacert``, when given, is the CA
    bundle instead of the file's ``ca-file`` (which is then not checked)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with path.open() as handle:
            parser.read_file(handle)
    except OSError as exc:
        raise CloudConfError(
            f"cannot read {path}: {exc.strerror or type(exc).__name__}; mount the cluster's cloud.conf there "
            f"(Secret kube-system/cloud-config, key cloud.conf), or unset it to use clouds.yaml"
        ) from None
    except configparser.Error as exc:
        raise CloudConfError(f"{path} is not a cloud.conf: {_syntax_problem(exc)}") from None
    if not parser.has_section("Global"):
        raise CloudConfError(f"{path} has no [Global] section: a cloud.conf holds its credentials there")
    values: dict[str, str] = {}
    for key, raw in parser["Global"].items():
        try:
            values[key] = gcfg_value(raw)
        except ValueError as exc:
            raise CloudConfError(f"{path}: [Global] {key}: {exc}") from None
    auth = {option: values[key] for key, option in _AUTH_KEYS.items() if values.get(key)}
    if "auth_url" not in auth:
        raise CloudConfError(f"{path}: [Global] has no auth-url")
    application_credential = "application_credential_secret" in auth
    if not application_credential and "password" not in auth:
        raise CloudConfError(f"{path}: [Global] has neither a password nor an application credential")
    options: dict[str, Any] = {
        "auth_type": "v3applicationcredential" if application_credential else "v3password",
        "auth": auth,
        "identity_api_version": "3",
        "interface": "public",
    }
    if values.get("region"):
        options["region_name"] = values["region"]
    if cacert is not None:
        options["cacert"] = str(cacert)
    elif values.get("ca-file"):
        ca_file = Path(values["ca-file"])
        if not ca_file.is_file():
            raise CloudConfError(
                f"{path}: [Global] ca-file {ca_file} is not a readable file (mount the CA bundle there, "
                "or set LANDB_OS_CACERT to a CA bundle on this machine, which wins over ca-file)"
            )
        options["cacert"] = str(ca_file)
    return options


def _syntax_problem(error: configparser.Error) -> str:
    """What is wrong and on which line, never the line itself (it may hold a password)."""
    if isinstance(error, configparser.MissingSectionHeaderError):
        return f"line {error.lineno} comes before any [section] header; the file starts with [Global]"
    if isinstance(error, configparser.DuplicateOptionError):
        return f"[{error.section}] {error.option} is set twice (line {error.lineno})"
    if isinstance(error, configparser.DuplicateSectionError):
        return f"[{error.section}] appears twice (line {error.lineno})"
    if isinstance(error, configparser.ParsingError):
        lines = ", ".join(str(line) for line, _ in error.errors)
        return f"line {lines} is neither `key = value` nor a [section] header"
    return type(error).__name__


def gcfg_value(raw: str) -> str:
    """One value as gcfg reads it: quoted parts unquoted and unescaped, a comment outside quotes dropped.

    Raises ValueError (without quoting the value: it may be a password) for an unterminated quote or
    an unknown escape.
    """
    value: list[str] = []
    pending_space = ""
    quoted = False
    characters = iter(raw.strip())
    for character in characters:
        if character == "\\":
            escaped = next(characters, "")
            if escaped not in _ESCAPES:
                raise ValueError("unknown escape sequence")
            value.append(pending_space + _ESCAPES[escaped])
            pending_space = ""
        elif character == '"':
            quoted = not quoted
            value.append(pending_space)
            pending_space = ""
        elif quoted:
            value.append(character)
        elif character in ";#":
            break
        elif character.isspace():
            pending_space += character  # kept only if something follows on the line
        else:
            value.append(pending_space + character)
            pending_space = ""
    if quoted:
        raise ValueError("unterminated quoted value")
    return "".join(value)
