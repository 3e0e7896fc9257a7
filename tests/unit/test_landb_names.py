"""Names an operator may put on an Ingress, and what becomes of them (landb/names.py)."""

from __future__ import annotations

import pytest

from landb_webhook.landb.names import InvalidName, LoadToken, label_for, parse_token


@pytest.mark.parametrize(
    ("dns_name", "label"),
    [
        ("myapp.cern.ch", "myapp"),
        ("MyApp.CERN.ch.", "myapp"),
        ("my-app-2.cern.ch", "my-app-2"),
        ("0.cern.ch", "0"),
    ],
)
def test_names_in_the_zone_become_aliases(dns_name: str, label: str) -> None:
    assert label_for(dns_name, "cern.ch") == label


@pytest.mark.parametrize(
    ("dns_name", "reason", "kind"),
    [
        ("myapp.example.org", "not in the cern.ch zone", "other_zone"),
        ("myapp.web.cern.ch", "more than one label", "multi_label"),
        ("*.cern.ch", "wildcard", "wildcard"),
        ("my_app.cern.ch", "only a-z, 0-9 and '-'", "invalid_characters"),
        ("-myapp.cern.ch", "neither start nor end with '-'", "invalid_characters"),
        ("\u212aube.cern.ch", "not ASCII", "invalid_characters"),
        (f"{'a' * 64}.cern.ch", "64 characters, more than 63", "too_long"),
        (".cern.ch", "empty label", "empty"),
    ],
)
def test_names_landb_cannot_publish_are_refused_with_the_reason(
    dns_name: str, reason: str, kind: str
) -> None:
    with pytest.raises(InvalidName) as refused:
        label_for(dns_name, "cern.ch")
    assert reason in str(refused.value)
    assert repr(dns_name) in str(refused.value), "the operator must see which name was refused"
    assert refused.value.kind == kind


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("myapp--load-1-", LoadToken("myapp", 1)),
        ("MyApp--LOAD-1-", LoadToken("myapp", 1)),
        (" myapp--load-12- ", LoadToken("myapp", 12)),
        ("myapp", None),
        ("myapp--load-", None),
        ("\u212aapp--load-1-", None),  # KELVIN SIGN lower-cases to "k": not the alias "kapp"
        ("app\u017f--load-1-", None),  # LONG S lower-cases... to itself, but is still not ASCII
    ],
)
def test_tokens_found_in_a_value(text: str, token: LoadToken | None) -> None:
    assert parse_token(text) == token
