"""external-dns' --registry as one value (provider/registry.py): read from LANDB_REGISTRY in one place,
asked by the provider."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from landb_webhook.config import Settings
from landb_webhook.provider.registry import NOOP, TXT, Registry
from landb_webhook.wiring import provider_options


def test_each_name_is_its_registry_and_no_other_name_is_one() -> None:
    assert Registry.named("txt") is TXT
    assert Registry.named("noop") is NOOP
    with pytest.raises(ValueError, match="txt or noop"):
        Registry.named("aws-sd")


def test_with_owners_a_name_is_ours_only_when_claimed_without_every_name_is() -> None:
    claimed = {"app.cern.ch"}

    assert TXT.owns("app.cern.ch", claimed)
    assert not TXT.owns("other.cern.ch", claimed)
    assert NOOP.owns("other.cern.ch", claimed)
    assert NOOP.owns("other.cern.ch", set())


def test_only_a_registry_with_owners_spares_what_has_none() -> None:
    assert TXT.has_owners and TXT.spares_ownerless
    assert not NOOP.has_owners and not NOOP.spares_ownerless


@pytest.mark.parametrize(("name", "registry"), [("txt", TXT), ("noop", NOOP)])
def test_the_setting_reaches_the_provider_as_the_value(name: str, registry: Registry) -> None:
    settings = Settings(registry=name)

    assert settings.external_dns_registry is registry
    assert provider_options(settings).registry is registry


def test_the_provider_defaults_to_the_txt_registry() -> None:
    assert Settings().external_dns_registry is TXT
    assert provider_options(Settings()).registry is TXT


def test_adoption_is_refused_without_owners_and_beside_an_unknown_registry() -> None:
    assert Settings(registry="txt", adopt_existing=True).adopt_existing
    with pytest.raises(ValidationError, match="needs registry txt"):
        Settings(registry="noop", adopt_existing=True)
    with pytest.raises(ValidationError) as raised:
        Settings(registry="bogus", adopt_existing=True)
    assert {error["loc"][0] for error in raised.value.errors()} == {"registry", "adopt_existing"}
