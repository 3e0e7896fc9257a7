"""The webhook JSON as external-dns reads and writes it, to and from :mod:`landb_webhook.endpoint`.

Decoding is as forgiving as Go's ``encoding/json``: keys match case-insensitively (the later of two
spellings wins), unknown keys are ignored, ``null`` means "empty". It is as strict about types: a
string where a list belongs, or a number where a string belongs, is a :class:`WireFormatError`.

Two decoders, one answer. external-dns sends exactly the keys below and no ``null`` member: the *exact*
models take such a body straight from its bytes into tuples (pydantic-core, no Python dict per object,
each repeated address one string), and anything else they refuse (another spelling of a key, an unknown
key, a ``null``, a wrong type) goes to the *forgiving* models, which match keys as Go does and say what
is wrong. The body of a node joining 500 x 1,000 (15.1 MiB, ``python -m bench.body_memory --node-joining
500,1000``): 131 ms of CPU and 31 MiB over the start at the peak, where the forgiving models alone took
358 ms and 101 MiB (the Python dicts their key matching needs, then lists copied into tuples).
Encoding follows the Go ``omitempty`` tags: empty strings, empty lists, empty maps and TTL 0 are left out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from typing_extensions import TypedDict

from landb_webhook.endpoint import Changes, DomainFilter, Endpoint

MEDIA_TYPE = "application/external.dns.webhook+json;version=1"
"""Compared byte for byte by external-dns: no space after ``;``, no charset."""

_INT64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class WireFormatError(ValueError):
    """The body is not JSON of the shape external-dns sends; the webhook answers 400.

    ``kind`` is ``not_json`` or ``wrong_shape``: a fixed word for metrics labels.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class _WireModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _go_style_keys(cls, data: Any) -> Any:
        """Match keys case-insensitively and treat ``null`` as absent, as Go's decoder does."""
        if not isinstance(data, dict):
            return data
        keys = _json_keys_by_lower_case(cls)
        matched: dict[str, Any] = {}
        for key, value in data.items():
            canonical = keys.get(str(key).lower())
            if canonical is None:
                continue
            if value is None:
                matched.pop(canonical, None)
            else:
                matched[canonical] = value
        return cls._null_members_to_zero(matched)

    @classmethod
    def _null_members_to_zero(cls, data: dict[str, Any]) -> dict[str, Any]:
        return data


@functools.cache
def _json_keys_by_lower_case(model: type[BaseModel]) -> dict[str, str]:
    return {(field.alias or name).lower(): field.alias or name for name, field in model.model_fields.items()}


class ProviderSpecificProperty(_WireModel):
    name: str = ""
    value: str = ""


def _null_items_to_empty_strings(value: Any) -> Any:
    if isinstance(value, list):
        return ["" if item is None else item for item in value]
    return value


class EndpointModel(_WireModel):
    dns_name: str = Field("", alias="dnsName")
    targets: list[str] = Field(default_factory=list)
    record_type: str = Field("", alias="recordType")
    set_identifier: str = Field("", alias="setIdentifier")
    record_ttl: _INT64 = Field(0, alias="recordTTL")
    labels: dict[str, str] = Field(default_factory=dict)
    provider_specific: list[ProviderSpecificProperty] = Field(default_factory=list, alias="providerSpecific")

    @classmethod
    def _null_members_to_zero(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Go decodes ``null`` inside a list or map as the zero value: an empty string or property."""
        if "targets" in data:
            data["targets"] = _null_items_to_empty_strings(data["targets"])
        if isinstance(data.get("labels"), dict):
            data["labels"] = {key: "" if value is None else value for key, value in data["labels"].items()}
        if isinstance(data.get("providerSpecific"), list):
            data["providerSpecific"] = [{} if item is None else item for item in data["providerSpecific"]]
        return data

    @classmethod
    def from_endpoint(cls, endpoint: Endpoint) -> EndpointModel:
        """Built without validation (``model_construct``): an Endpoint is already typed, and validating
        300 endpoints of 150 targets each was most of the cost of encoding Records."""
        return cls.model_construct(
            dns_name=endpoint.dns_name,
            targets=list(endpoint.targets),
            record_type=endpoint.record_type,
            set_identifier=endpoint.set_identifier,
            record_ttl=endpoint.record_ttl,
            labels=dict(sorted(endpoint.labels)),
            provider_specific=[
                ProviderSpecificProperty.model_construct(name=name, value=value)
                for name, value in endpoint.provider_specific
            ],
        )

    def to_endpoint(self) -> Endpoint:
        return _endpoint_of(self)


class _ExactModel(BaseModel):
    """The fast path: external-dns' own spelling of every key, no other key, no ``null`` member."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _ExactProperty(_ExactModel):
    name: str = ""
    value: str = ""


class _ExactEndpoint(_ExactModel):
    dns_name: str = Field("", alias="dnsName")
    targets: tuple[str, ...] = ()
    record_type: str = Field("", alias="recordType")
    set_identifier: str = Field("", alias="setIdentifier")
    record_ttl: _INT64 = Field(0, alias="recordTTL")
    labels: dict[str, str] = Field(default_factory=dict)
    provider_specific: tuple[_ExactProperty, ...] = Field((), alias="providerSpecific")

    def to_endpoint(self) -> Endpoint:
        return _endpoint_of(self)


def _endpoint_of(model: EndpointModel | _ExactEndpoint) -> Endpoint:
    """The exact model's targets are a tuple already: ``tuple()`` of it is the same object, no copy."""
    return Endpoint(
        dns_name=model.dns_name,
        record_type=model.record_type,
        targets=tuple(model.targets),
        set_identifier=model.set_identifier,
        record_ttl=model.record_ttl,
        labels=tuple(sorted(model.labels.items())),
        provider_specific=tuple((prop.name, prop.value) for prop in model.provider_specific),
    )


_ExactEndpoints = tuple[_ExactEndpoint | None, ...]
_Element = TypeVar("_Element")


class _ExactChangesOf(_ExactModel, Generic[_Element]):
    """ApplyChanges' four lists in external-dns' spelling, of endpoints read as ``_Element``."""

    create: tuple[_Element | None, ...] = ()
    update_old: tuple[_Element | None, ...] = Field((), alias="updateOld")
    update_new: tuple[_Element | None, ...] = Field((), alias="updateNew")
    delete: tuple[_Element | None, ...] = ()


_ExactChanges = _ExactChangesOf[_ExactEndpoint]


# A ``null`` element of an endpoint list is a nil pointer in Go; we skip it rather than fail the loop.
_EndpointList = list[EndpointModel | None]


class ChangesModel(_WireModel):
    create: _EndpointList = Field(default_factory=list)
    update_old: _EndpointList = Field(default_factory=list, alias="updateOld")
    update_new: _EndpointList = Field(default_factory=list, alias="updateNew")
    delete: _EndpointList = Field(default_factory=list)


def _to_changes(model: ChangesModel | _ExactChanges) -> Changes:
    return Changes(
        create=_to_endpoints(model.create),
        update_old=_to_endpoints(model.update_old),
        update_new=_to_endpoints(model.update_new),
        delete=_to_endpoints(model.delete),
    )


class DomainFilterModel(_WireModel):
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)


def _to_endpoints(models: Iterable[EndpointModel | _ExactEndpoint | None]) -> tuple[Endpoint, ...]:
    return tuple(model.to_endpoint() for model in models if model is not None)


class _Unread(TypedDict, total=False):
    """An endpoint's object with none of its members read: counting it costs one empty dict."""

    __pydantic_config__ = ConfigDict(extra="ignore")  # type: ignore[misc]


_UnreadEndpoints = tuple[_Unread | None, ...]
_UnreadChanges = _ExactChangesOf[_Unread]


_ENDPOINTS_IN: TypeAdapter[_EndpointList | None] = TypeAdapter(_EndpointList | None)
_CHANGES_IN: TypeAdapter[ChangesModel | None] = TypeAdapter(ChangesModel | None)
_EXACT_ENDPOINTS_IN: TypeAdapter[_ExactEndpoints | None] = TypeAdapter(_ExactEndpoints | None)
_EXACT_CHANGES_IN: TypeAdapter[_ExactChanges | None] = TypeAdapter(_ExactChanges | None)
_ENDPOINTS_OUT: TypeAdapter[list[EndpointModel]] = TypeAdapter(list[EndpointModel])
_UNREAD_ENDPOINTS_IN: TypeAdapter[_UnreadEndpoints] = TypeAdapter(_UnreadEndpoints)
_UNREAD_CHANGES_IN: TypeAdapter[_UnreadChanges] = TypeAdapter(_UnreadChanges)


def _wire_error(what: str, error: ValidationError) -> WireFormatError:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in detail['loc']) or 'body'}: {detail['msg']}"
        for detail in error.errors(include_url=False, include_input=False)[:5]
    )
    not_json = any(detail["type"] == "json_invalid" for detail in error.errors(include_url=False))
    return WireFormatError(f"invalid {what}: {problems}", "not_json" if not_json else "wrong_shape")


def endpoint_count(decoded: Sequence[object] | Changes | _UnreadChanges) -> int:
    """The endpoints of an endpoint list, or of Changes' four lists together."""
    if isinstance(decoded, Changes | _UnreadChanges):
        return len(decoded.create) + len(decoded.update_old) + len(decoded.update_new) + len(decoded.delete)
    return len(decoded)


def endpoints_over(body: bytes, limit: int) -> int | None:
    """How many endpoints ``body`` holds (an endpoint list, or Changes' four lists together) when that is
    more than ``limit``, else None; counted without decoding them, so that a body of too many names is
    refused before it costs what decoding them does. 16 MiB of names (~100,000): ~130 ms and ~60 MiB at
    the peak, where decoding them took ~200 MiB. A body with no more objects than ``limit`` is not read
    at all (a node joining 500 x 1,000 sends 4,000); one not in external-dns' exact spelling is not
    counted here (None), its decoder's result is."""
    if body.count(b"{") <= limit:
        return None
    try:
        # One adapter by the body's first character: a union of both read 16 MiB of names at ~150 MiB.
        if body.lstrip()[:1] == b"[":
            count = len(_UNREAD_ENDPOINTS_IN.validate_json(body))
        else:
            count = endpoint_count(_UNREAD_CHANGES_IN.validate_json(body))
    except ValidationError:
        return None
    return count if count > limit else None


def decode_endpoints(body: bytes | str) -> list[Endpoint]:
    """A JSON array of endpoints (POST /adjustendpoints, GET /records); ``null`` is an empty list."""
    try:
        exact = _EXACT_ENDPOINTS_IN.validate_json(body)
    except ValidationError:
        return forgiving_endpoints(body)
    return list(_to_endpoints(exact or ()))


def forgiving_endpoints(body: bytes | str) -> list[Endpoint]:
    """``decode_endpoints`` by the forgiving models alone: what it answers whatever the spelling."""
    try:
        models = _ENDPOINTS_IN.validate_json(body)
    except ValidationError as error:
        raise _wire_error("endpoint list", error) from None
    return list(_to_endpoints(models or ()))


def decode_changes(body: bytes | str) -> Changes:
    """The Changes object of POST /records, in either the current or the pre-v0.17 key spelling."""
    try:
        model = _EXACT_CHANGES_IN.validate_json(body)
    except ValidationError:
        return forgiving_changes(body)
    return _to_changes(model) if model is not None else Changes()


def forgiving_changes(body: bytes | str) -> Changes:
    """``decode_changes`` by the forgiving models alone: what it answers whatever the spelling."""
    try:
        model = _CHANGES_IN.validate_json(body)
    except ValidationError as error:
        raise _wire_error("changes", error) from None
    return _to_changes(model) if model is not None else Changes()


def encode_endpoints(endpoints: Sequence[Endpoint]) -> bytes:
    return _ENDPOINTS_OUT.dump_json(
        [EndpointModel.from_endpoint(endpoint) for endpoint in endpoints],
        by_alias=True,
        exclude_defaults=True,
    )


def encode_changes(changes: Changes) -> bytes:
    """What external-dns sends to POST /records; for tests, benchmarks and the demo."""
    model = ChangesModel(
        create=[EndpointModel.from_endpoint(endpoint) for endpoint in changes.create],
        updateOld=[EndpointModel.from_endpoint(endpoint) for endpoint in changes.update_old],
        updateNew=[EndpointModel.from_endpoint(endpoint) for endpoint in changes.update_new],
        delete=[EndpointModel.from_endpoint(endpoint) for endpoint in changes.delete],
    )
    return model.model_dump_json(by_alias=True, exclude_defaults=True).encode()


def encode_domain_filter(domain_filter: DomainFilter) -> bytes:
    """``{"include":[...]}``, sorted as Go sorts them; ``{}`` (match everything) when empty."""
    model = DomainFilterModel(include=sorted(domain_filter.include), exclude=sorted(domain_filter.exclude))
    return model.model_dump_json(exclude_defaults=True).encode()
