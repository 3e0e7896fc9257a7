"""openstacksdk's and keystoneauth's exceptions as the webhook says them: one UpstreamError each.

- Every failure becomes backends.UpstreamError("nova" | "keystone" | ..., ...): retryable for 5xx,
  connection failures and timeouts, not retryable for 4xx (:func:`upstream_error`). Its reason says the
  action, the status and the request id, never an upstream body: of a Nova error only the ``message`` of
  its one known form, short and redacted.
- How the retry policy sees a failure (:func:`failure_of`), how a failed authentication is labelled
  (:func:`keystone_result`: ``keystone_unreachable`` or ``auth_refused``), and whether a failure tells
  against OpenStack as a whole or only against one request (:func:`about_one_request`).
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import openstack.exceptions as sdk_exceptions
from keystoneauth1 import exceptions as ksa_exceptions

from landb_webhook.adapters.authlock import AuthenticationBusy
from landb_webhook.adapters.retry import Failure, connection_failure, failure_of_status, parse_retry_after
from landb_webhook.backends import UpstreamError
from landb_webhook.logs import redact_text

NOVA = "nova"
KEYSTONE = "keystone"

KEYSTONE_UNREACHABLE = "keystone_unreachable"
AUTH_REFUSED = "auth_refused"

_MAX_REASON_LENGTH = 300
_MAX_NOVA_MESSAGE_LENGTH = 160
_MAX_CAUSES = 5
_REQUEST_ID = re.compile(r"req-[0-9a-f-]{1,64}")
_HTTP_UNAUTHORIZED = 401
_HTTP_TOO_MANY_REQUESTS = 429
_HTTP_REQUEST_TIMEOUT = 408
_HTTP_CREDENTIALS_REFUSED = (401, 403)
_REFUSALS = (
    ksa_exceptions.AuthorizationFailure,
    ksa_exceptions.AuthPluginException,
    ksa_exceptions.CatalogException,
    sdk_exceptions.ConfigException,
)


class ForeignResource(Exception):
    """A resource of another project than the credential's, refused before it is used: an admin's (or a
    global reader's) token reads, and may write, every project's."""

    def __init__(self, kind: str, resource_id: str, project_id: str, own: str) -> None:
        super().__init__(
            f"{kind} {resource_id} belongs to project {project_id}, not to the credential's ({own})"
        )
        self.project_id = project_id


def keystone_result(exc: BaseException) -> str:
    """What a failed authentication says happened: ``auth_refused`` when Keystone answered and refused (a
    4xx other than 408 and 429, an authorization or configuration failure); ``keystone_unreachable`` when
    it did not answer or failed (refused or reset connections, DNS, TLS, timeouts, 5xx, 408, 429)."""
    cause: BaseException | None = exc
    for _ in range(_MAX_CAUSES):
        if cause is None:
            break
        status = _status_of(cause)
        if status is not None:
            refused = 400 <= status < 500 and status not in (_HTTP_REQUEST_TIMEOUT, _HTTP_TOO_MANY_REQUESTS)
            return AUTH_REFUSED if refused else KEYSTONE_UNREACHABLE
        if isinstance(cause, _REFUSALS) or (isinstance(cause, UpstreamError) and not cause.retryable):
            return AUTH_REFUSED
        cause = cause.__cause__ or cause.__context__
    return KEYSTONE_UNREACHABLE


def failure_of(error: UpstreamError) -> tuple[Failure, float | None]:
    """How the policy sees this failure, and the ``Retry-After`` of its reply if it had one."""
    cause = error.__cause__
    response = getattr(cause, "response", None)
    headers = getattr(response, "headers", None) or {}
    retry_after = parse_retry_after(headers.get("Retry-After"))
    status = _status_of(cause)
    if status == _HTTP_UNAUTHORIZED and error.upstream == NOVA:
        # Nova refused the token even after keystoneauth's one re-authentication: with parallel
        # writers, one thread's re-authentication can void the token another just fetched. A new
        # attempt logs in afresh; refused credentials fail at Keystone, where a 401 is final.
        return Failure.TRANSIENT, retry_after
    if status is not None:
        return failure_of_status(status), retry_after
    return (Failure.TRANSIENT if error.retryable else Failure.FINAL), retry_after


def _status_of(exc: BaseException | None) -> int | None:
    if isinstance(exc, sdk_exceptions.HttpException) and exc.status_code:
        return int(exc.status_code)
    if isinstance(exc, ksa_exceptions.HttpError) and exc.http_status:
        return int(exc.http_status)
    return None


def upstream_error(exc: BaseException, upstream: str, action: str) -> UpstreamError:
    """Map an openstacksdk / keystoneauth exception to an UpstreamError that carries no upstream body.

    It says the action, the status and the request id; of a Nova error body only the ``message`` of
    its one known form (``{"badRequest": {"message": ...}}``), short and redacted, since it tells an
    operator what to fix ("Instance ... is locked"). Texts that may quote a reply (a version discovery
    failure, an unknown exception) are reduced to their kind. ``upstream`` is the service being called
    when the exception happened; errors that can only come from authentication are Keystone's.
    """
    if isinstance(exc, UpstreamError):
        return exc
    retryable = False
    if isinstance(exc, sdk_exceptions.HttpException):
        status = exc.status_code or 0
        reason = f"HTTP {status}{_nova_message(exc.response)}{_request_id(exc.request_id)}"
        retryable = _retryable_status(status)
    elif isinstance(exc, ksa_exceptions.HttpError):
        upstream = KEYSTONE
        reason = f"HTTP {exc.http_status} {type(exc).__name__}{_request_id(exc.request_id)}"
        retryable = _retryable_status(exc.http_status)
    elif isinstance(exc, ForeignResource):
        reason = f"refused: {exc}"
    elif isinstance(exc, AuthenticationBusy):
        upstream, reason, retryable = KEYSTONE, f"authentication busy: {exc}", True
    elif isinstance(exc, ksa_exceptions.SSLError):
        reason = f"TLS failure: {_one_line(str(exc))}"
    elif isinstance(exc, ksa_exceptions.ConnectTimeout):
        reason, retryable = "timed out", True
    elif isinstance(exc, ksa_exceptions.ConnectionError):
        reason, retryable = f"connection failed: {connection_failure(str(exc))}", True
    elif isinstance(exc, ksa_exceptions.DiscoveryFailure):
        reason, retryable = f"version discovery failed: {_discovery_failure_cause(exc, upstream)}", True
    elif isinstance(
        exc,
        ksa_exceptions.AuthorizationFailure
        | ksa_exceptions.AuthPluginException
        | ksa_exceptions.CatalogException
        | sdk_exceptions.ConfigException,
    ):
        upstream = KEYSTONE
        reason = f"{type(exc).__name__}: {_one_line(str(exc))}"
    elif isinstance(exc, sdk_exceptions.InvalidResponse):
        reason, retryable = "invalid response", True
    else:
        reason = type(exc).__name__
    return UpstreamError(upstream, _shorten(f"{action}: {reason}".strip()), retryable=retryable)


def _shorten(text: str) -> str:
    """At most _MAX_REASON_LENGTH characters, cut between words."""
    return textwrap.shorten(text, _MAX_REASON_LENGTH, placeholder=" ...")


def _discovery_failure_cause(exc: BaseException, upstream: str) -> str:
    """What made version discovery fail (a TLS failure, a 401...), mapped like any error: keystoneauth
    raises its DiscoveryFailure while handling it, and quotes it, reply text included, in its message."""
    cause: BaseException | None = exc
    for _ in range(_MAX_CAUSES):
        cause = cause.__cause__ or cause.__context__ if cause is not None else None
        if cause is None:
            break
        if not isinstance(cause, ksa_exceptions.DiscoveryFailure):
            return upstream_error(cause, upstream, "").reason.removeprefix(":").strip()
    return "no usable version document (check auth_url)"


def _nova_message(response: Any) -> str:
    """``": <message>"`` of Nova's error body (``{"<fault>": {"code": N, "message": "..."}}``), short and
    redacted; "" for any other body."""
    try:
        body = response.json() if response is not None else None
    except ValueError:
        return ""
    if not isinstance(body, dict) or len(body) != 1:
        return ""
    [fault] = body.values()
    message = fault.get("message") if isinstance(fault, dict) else None
    if not isinstance(message, str) or not message.strip():
        return ""
    return f": {redact_text(_one_line(message))[:_MAX_NOVA_MESSAGE_LENGTH]}"


def _request_id(request_id: str | None) -> str:
    return f" (request {request_id})" if request_id and _REQUEST_ID.fullmatch(request_id) else ""


def about_one_request(exc: BaseException | None) -> bool:
    """A Nova 4xx other than refused credentials or throttling: this request was wrong (a locked server,
    a rejected value), OpenStack itself is usable. So is another project's resource, refused here."""
    if isinstance(exc, ForeignResource):
        return True
    if not isinstance(exc, sdk_exceptions.HttpException):
        return False
    status = exc.status_code or 0
    return 400 <= status < 500 and status not in _HTTP_CREDENTIALS_REFUSED and not _retryable_status(status)


def _retryable_status(status: int) -> bool:
    return status >= 500 or status in (_HTTP_TOO_MANY_REQUESTS, _HTTP_REQUEST_TIMEOUT) or status == 0


def _one_line(text: str) -> str:
    return " ".join(text.split())
