"""The JSON codec against what external-dns sends and expects (provider/webhook/api/httpapi_test.go)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from landb_webhook.endpoint import Changes, DomainFilter, Endpoint
from landb_webhook.webhook.wire import (
    MEDIA_TYPE,
    EndpointModel,
    WireFormatError,
    decode_changes,
    decode_endpoints,
    encode_changes,
    encode_domain_filter,
    encode_endpoints,
    forgiving_changes,
    forgiving_endpoints,
)

CONTRACT_EXAMPLE = (
    '{"dnsName":"app.cern.ch","targets":["188.184.1.2","188.184.1.3"],"recordType":"A","setIdentifier":"",'
    '"recordTTL":0,"labels":{"owner":"x","resource":"ingress/ns/name"},'
    '"providerSpecific":[{"name":"webhook/x","value":"y"}]}'
)


def test_media_type_is_the_exact_string_external_dns_compares() -> None:
    assert MEDIA_TYPE.encode() == b"application/external.dns.webhook+json;version=1"


def test_decodes_every_endpoint_field() -> None:
    [endpoint] = decode_endpoints(f"[{CONTRACT_EXAMPLE}]")

    assert endpoint == Endpoint(
        dns_name="app.cern.ch",
        record_type="A",
        targets=("188.184.1.2", "188.184.1.3"),
        labels=(("owner", "x"), ("resource", "ingress/ns/name")),
        provider_specific=(("webhook/x", "y"),),
    )


def test_mixed_case_change_keys_as_in_external_dns_fixture() -> None:
    # TestRecordsHandlerWithMixedCase: pre-v0.17 capitalised keys mixed with current ones.
    changes = decode_changes(
        '{"Create":[{"dnsName":"foo"}],"updateOld":[{"dnsName":"bar"}],'
        '"updateNew":[{"dnsName":"baz"}],"Delete":[{"dnsName":"qux"}]}'
    )

    assert [e.dns_name for e in changes.create] == ["foo"]
    assert [e.dns_name for e in changes.update_old] == ["bar"]
    assert [e.dns_name for e in changes.update_new] == ["baz"]
    assert [e.dns_name for e in changes.delete] == ["qux"]


def test_endpoint_keys_match_case_insensitively_like_go() -> None:
    [endpoint] = decode_endpoints(
        '[{"DNSName":"a.cern.ch","RecordType":"A","Targets":["1.2.3.4"],"recordttl":60}]'
    )

    assert (endpoint.dns_name, endpoint.record_type, endpoint.targets, endpoint.record_ttl) == (
        "a.cern.ch",
        "A",
        ("1.2.3.4",),
        60,
    )


def test_null_or_missing_change_lists_are_empty() -> None:
    old_style = decode_changes('{"Create":null,"UpdateOld":null,"UpdateNew":null,"Delete":null}')

    assert old_style == Changes()
    assert decode_changes("{}") == Changes()
    assert decode_changes("null") == Changes()
    assert decode_changes('{"create":[{"dnsName":"a"}]}').delete == ()


def test_null_members_decode_as_go_zero_values() -> None:
    [endpoint] = decode_endpoints(
        '[{"dnsName":"a","recordType":null,"targets":["x",null],"labels":{"k":null},'
        '"providerSpecific":null,"recordTTL":null,"setIdentifier":null}, null]'
    )

    assert endpoint == Endpoint(dns_name="a", record_type="", targets=("x", ""), labels=(("k", ""),))
    assert decode_endpoints("null") == []
    assert decode_endpoints('[{"dnsName":"a","targets":null}]')[0].targets == ()


def test_unknown_keys_are_ignored() -> None:
    [endpoint] = decode_endpoints('[{"dnsName":"a","someFutureField":{"x":[1]}}]')
    assert endpoint.dns_name == "a"
    assert decode_changes('{"create":[],"somethingNew":true}') == Changes()


@pytest.mark.parametrize(
    "body",
    [
        "",
        "{",
        "not json",
        '{"create":[{"dnsName":"a"}]}',  # an object where the endpoint list belongs
        '"[]"',
        '[{"dnsName":7}]',  # a number where a string belongs
        '[{"targets":"1.2.3.4"}]',  # a string where a list belongs
        '[{"recordTTL":"300"}]',  # Go's int64 does not take strings
        '[{"recordTTL":300.5}]',
        '[{"recordTTL":9223372036854775808}]',  # beyond int64
        '[{"labels":["a"]}]',
    ],
)
def test_bodies_go_would_reject_are_wire_format_errors(body: str) -> None:
    with pytest.raises(WireFormatError):
        decode_endpoints(body)


@pytest.mark.parametrize("body", ["", "[]", '{"create":"x"}', '{"delete":[1]}', "{'create': []}"])
def test_malformed_changes_are_wire_format_errors(body: str) -> None:
    with pytest.raises(WireFormatError):
        decode_changes(body)


def test_empty_fields_are_omitted_on_output_like_go_omitempty() -> None:
    encoded = json.loads(encode_endpoints([Endpoint(dns_name="a.cern.ch", record_type="A")]))

    assert encoded == [{"dnsName": "a.cern.ch", "recordType": "A"}]


def test_ttl_and_set_identifier_are_written_when_set() -> None:
    endpoint = Endpoint(
        dns_name="a", record_type="A", targets=("1.1.1.1",), set_identifier="eu", record_ttl=60
    )

    assert json.loads(encode_endpoints([endpoint])) == [
        {"dnsName": "a", "recordType": "A", "targets": ["1.1.1.1"], "setIdentifier": "eu", "recordTTL": 60}
    ]


def test_txt_ownership_record_survives_a_round_trip_byte_for_byte() -> None:
    value = '"heritage=external-dns,external-dns/owner=default,external-dns/resource=ingress/ns/app"'
    txt = Endpoint(
        dns_name="a-app.cern.ch",
        record_type="TXT",
        targets=(value,),
        labels=(("ownedRecord", "app.cern.ch"),),
    )

    [decoded] = decode_endpoints(encode_endpoints([txt]))

    assert decoded.targets[0] == value
    assert decoded == txt


def test_domain_filter_encoding() -> None:
    assert encode_domain_filter(DomainFilter()) == b"{}"
    assert json.loads(encode_domain_filter(DomainFilter(include=("z.org", "cern.ch")))) == {
        "include": ["cern.ch", "z.org"]
    }
    assert json.loads(encode_domain_filter(DomainFilter(exclude=("test.cern.ch",)))) == {
        "exclude": ["test.cern.ch"]
    }


_text = st.text(max_size=12)
_endpoints = st.builds(
    Endpoint,
    dns_name=_text,
    record_type=st.sampled_from(["", "A", "AAAA", "CNAME", "TXT"]),
    targets=st.lists(_text, max_size=3).map(tuple),
    set_identifier=_text,
    record_ttl=st.integers(min_value=0, max_value=2**31),
    labels=st.dictionaries(_text, _text, max_size=3).map(lambda labels: tuple(sorted(labels.items()))),
    provider_specific=st.lists(st.tuples(_text, _text), max_size=2).map(tuple),
)


@given(st.lists(_endpoints, max_size=4))
def test_endpoints_round_trip(endpoints: list[Endpoint]) -> None:
    assert decode_endpoints(encode_endpoints(endpoints)) == endpoints


@given(st.builds(Changes, *(st.lists(_endpoints, max_size=2).map(tuple) for _ in range(4))))
def test_changes_round_trip(changes: Changes) -> None:
    assert decode_changes(encode_changes(changes)) == changes


def _validated_model(endpoint: Endpoint) -> EndpointModel:
    """An endpoint's wire model built through pydantic's validation, as external-dns' JSON would be."""
    return EndpointModel.model_validate(
        {
            "dnsName": endpoint.dns_name,
            "targets": list(endpoint.targets),
            "recordType": endpoint.record_type,
            "setIdentifier": endpoint.set_identifier,
            "recordTTL": endpoint.record_ttl,
            "labels": dict(sorted(endpoint.labels)),
            "providerSpecific": [{"name": n, "value": v} for n, v in endpoint.provider_specific],
        }
    )


@given(st.lists(_endpoints, max_size=4))
def test_endpoints_encode_to_the_same_bytes_as_validated_models(endpoints: list[Endpoint]) -> None:
    validated = TypeAdapter(list[EndpointModel]).dump_json(
        [_validated_model(endpoint) for endpoint in endpoints], by_alias=True, exclude_defaults=True
    )
    assert encode_endpoints(endpoints) == validated


# Bodies near external-dns' own: its keys, other spellings of them, an unknown key; values of the right
# type, of a wrong one, and null. The exact models take some; whatever they take, they must answer as
# the forgiving ones do, and what they refuse is answered (or refused) by the forgiving ones.
_ENDPOINT_KEYS = (
    "dnsName", "DNSName", "targets", "Targets", "recordType", "recordtype", "setIdentifier",
    "recordTTL", "RecordTTL", "labels", "providerSpecific", "ProviderSpecific", "someFutureField",
)  # fmt: skip
_CHANGES_KEYS = ("create", "Create", "updateOld", "UpdateOld", "updateNew", "delete", "Delete", "other")
_small = st.one_of(st.none(), st.text(max_size=3), st.integers(-2, 2), st.booleans())
_member = st.one_of(
    _small,
    st.lists(_small, max_size=2),
    st.dictionaries(st.text(max_size=2), _small, max_size=2),
    st.lists(
        st.one_of(st.none(), st.dictionaries(st.sampled_from(("name", "value", "Name", "x")), _small)),
        max_size=2,
    ),
)
_wire_endpoint = st.one_of(
    st.none(), _small, st.dictionaries(st.sampled_from(_ENDPOINT_KEYS), _member, max_size=5)
)
_wire_endpoints = st.one_of(_small, st.lists(_wire_endpoint, max_size=3))


def _answer(decode: Callable[[str], object], body: str) -> object:
    try:
        return decode(body)
    except WireFormatError as error:
        return ("refused", str(error), error.kind)


@given(_wire_endpoints)
def test_an_endpoint_list_is_decoded_as_the_forgiving_models_decode_it(body: object) -> None:
    text = json.dumps(body)
    assert _answer(decode_endpoints, text) == _answer(forgiving_endpoints, text)


@given(st.one_of(_small, st.dictionaries(st.sampled_from(_CHANGES_KEYS), _wire_endpoints, max_size=4)))
def test_changes_are_decoded_as_the_forgiving_models_decode_them(body: object) -> None:
    text = json.dumps(body)
    assert _answer(decode_changes, text) == _answer(forgiving_changes, text)
