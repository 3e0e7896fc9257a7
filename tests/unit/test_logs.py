"""Logging: one renderer for our lines and the libraries', and no secret ever reaching a line."""

from __future__ import annotations

import io
import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from landb_webhook.logs import (
    OMITTED_BODY,
    REDACTED,
    LogFormat,
    LogLevel,
    RepeatLimitedLog,
    RepeatLimiter,
    configure_logging,
    get_logger,
    is_secret_key,
    redact_every_form,
    redact_secrets,
    redact_text,
    register_secrets,
    registered_secrets,
)

SECRETS = {
    "password": "hunter2-pw",
    "app_secret": "s3cr3t-appcred",
    "token": "raw-token-value",
    "fernet": "gAAAAABmZ8xk2v9QeLtbVq0YzT4n1c7Rw3ZpJfS6uHkM",
    "jwt": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJl",
    "bearer": "bearer-credential-xyz",
    "url_password": "url-pa55",
    "header_pair": "pair-token-value",
    "hashed_token": "3b9a2e0f0a1b2c3d4e5f60718293a4b5c6d7e8f9",
}


def log_everything_secret(output_format: LogFormat) -> str:
    stream = io.StringIO()
    configure_logging("info", output_format, stream=stream)
    log = get_logger("landb_webhook.test")

    log.info(
        "authenticating",
        password=SECRETS["password"],
        cloud={
            "auth": {
                "application_credential_id": "id-1",
                "application_credential_secret": SECRETS["app_secret"],
            }
        },
        headers=[("X-Auth-Token", SECRETS["header_pair"]), ("Accept", "application/json")],
        user="svc-landb",
    )
    log.info("token issued", **{"X-Subject-Token": SECRETS["token"]})
    log.warning(f"retrying with token {SECRETS['fernet']}")
    # keystoneauth's debug lines show tokens hashed as {SHA256}<hex>: still not for a log. (At error: its
    # warnings are debug lines, test_keystoneauth_warnings_are_debug_lines.)
    logging.getLogger("keystoneauth.session").error(
        'REQ: curl -g -i -X GET https://nova.cern.ch/v2.1 -H "X-Auth-Token: {SHA256}%s"',
        SECRETS["hashed_token"],
    )
    # What keystoneauth and the kubernetes client print at debug, as a library line:
    logging.getLogger("keystoneauth.session").error(
        'REQ: curl -g -i -X GET https://keystone.cern.ch/v3 -H "X-Auth-Token: %s" '
        "-H 'Authorization: Bearer %s' https://svc:%s@nova.cern.ch/servers sa=%s",
        SECRETS["token"],
        SECRETS["bearer"],
        SECRETS["url_password"],
        SECRETS["jwt"],
    )
    try:
        raise RuntimeError(f"Keystone refused {{'password': '{SECRETS['password']}'}}")
    except RuntimeError:
        log.exception("authentication failed")
    return stream.getvalue()


@pytest.mark.parametrize("output_format", ["json", "console"])
def test_no_secret_reaches_a_log_line(output_format: LogFormat) -> None:
    output = log_everything_secret(output_format)

    leaked = [name for name, secret in SECRETS.items() if secret in output]
    assert leaked == []
    # ...while everything around the secrets is still there to read.
    for visible in ("authenticating", "svc-landb", "id-1", "X-Auth-Token", "nova.cern.ch", "RuntimeError"):
        assert visible in output
    assert output.count("[REDACTED]") >= len(SECRETS)


def test_json_lines_carry_level_logger_and_time() -> None:
    output = log_everything_secret("json")

    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert {line["logger"] for line in lines} == {"landb_webhook.test", "keystoneauth.session"}
    assert all({"level", "timestamp", "event"} <= line.keys() for line in lines)
    assert "Traceback" in lines[-1]["exception"]


def library_and_own_lines(level: LogLevel) -> list[tuple[str, str]]:
    stream = io.StringIO()
    configure_logging(level, "json", stream=stream)
    for name in ("urllib3.connectionpool", "openstack", "kubernetes.client", "uvicorn.error"):
        logging.getLogger(name).info("library chatter")
        logging.getLogger(name).warning("library trouble")
    get_logger("landb_webhook.provider").debug("our detail")
    get_logger("landb_webhook.provider").info("our news")
    return [(line["logger"], line["event"]) for line in map(json.loads, stream.getvalue().splitlines())]


def test_libraries_log_only_warnings_unless_debug() -> None:
    lines = library_and_own_lines("info")

    assert ("urllib3.connectionpool", "library chatter") not in lines
    assert ("uvicorn.error", "library trouble") in lines
    assert ("openstack", "library trouble") in lines
    assert ("landb_webhook.provider", "our news") in lines
    assert ("landb_webhook.provider", "our detail") not in lines


def test_debug_shows_library_details_too() -> None:
    lines = library_and_own_lines("debug")

    assert ("urllib3.connectionpool", "library chatter") in lines
    assert ("landb_webhook.provider", "our detail") in lines


@pytest.mark.parametrize(("level", "shown"), [("info", []), ("debug", [("debug", "Failed to discover")])])
def test_keystoneauth_warnings_are_debug_lines(level: LogLevel, shown: list[tuple[str, str]]) -> None:
    """Each failed authentication makes keystoneauth warn once per request it tried; the OpenStack adapter
    says a Keystone outage itself, once (tests/integration/test_adapter_openstack_signals.py)."""
    stream = io.StringIO()
    configure_logging(level, "json", stream=stream)

    logging.getLogger("keystoneauth.identity.generic.base").warning("Failed to discover")
    logging.getLogger("keystoneauth.session").error("still an error")

    lines = [(line["level"], line["event"]) for line in map(json.loads, stream.getvalue().splitlines())]
    assert lines == [*shown, ("error", "still an error")]


def test_configuring_again_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", "json", stream=first)
    configure_logging("info", "json", stream=second)

    get_logger("landb_webhook.test").info("once")

    assert first.getvalue() == ""
    assert second.getvalue().count('"once"') == 1


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "OS_PASSWORD",
        "application_credential_secret",
        "applicationCredentialSecret",
        "client-secret",
        "X-Auth-Token",
        "X-Subject-Token",
        "access_token",
        "token",
        "Authorization",
        "api_key",
        "Cookie",
    ],
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "load_token",
        "alias_tokens",
        "tokens",
        "token_count",
        "key",
        "application_credential_id",
        "user",
        "aliases",
    ],
)
def test_keys_that_only_sound_alike_stay_readable(key: str) -> None:
    # landb `--load-N-` tokens are what the provider logs about; hiding them would hide everything.
    assert not is_secret_key(key)


def test_text_keeps_values_of_harmless_keys() -> None:
    text = "alias_tokens=myapp--load-0- error: conflict password=abc X-Auth-Token: def"

    assert redact_text(text) == (
        "alias_tokens=myapp--load-0- error: conflict password=[REDACTED] X-Auth-Token: [REDACTED]"
    )


_SECRETISH = st.sampled_from(
    [
        "password",
        "X-Auth-Token",
        "token",
        "gAAAAA",
        "eyJ",
        "abcdefgh",
        "://u:p@h",
        ":",
        "=",
        " ",
        "'",
        '"',
        "--load-3-",
        ",",
        "Bearer ",
        "{SHA256}",
        "-",
        "_",
        ".",
    ]
)


@given(st.lists(st.one_of(_SECRETISH, st.text(max_size=12)), max_size=12).map("".join))
def test_the_shortcut_for_texts_without_a_secret_mark_redacts_exactly_as_the_full_scan(text: str) -> None:
    assert redact_text(text) == redact_every_form(text)


# -- secrets by value, bare scheme values, upstream bodies -------------------------------------------------

BARE_PASSWORD = "Zq7-plain-password-4u"
BARE_SECRET = "appcred-secret-9f3k2m"
KUBE_TOKEN = "k8s-sa-token-opaque-1234567890"


def test_a_registered_secret_is_redacted_wherever_it_appears() -> None:
    register_secrets([BARE_PASSWORD, BARE_SECRET, "", None, "abc"])
    text = f'nova said: invalid value {BARE_PASSWORD}; also {BARE_SECRET}x and "{BARE_PASSWORD}"'
    redacted = redact_text(text)
    assert BARE_PASSWORD not in redacted and BARE_SECRET not in redacted
    assert redacted.count(REDACTED) == 3
    assert "abc" in redact_text("abc")  # too short to be searched for: it would blank ordinary words
    assert registered_secrets() == {BARE_PASSWORD, BARE_SECRET}


def test_registering_replaces_and_registering_none_forgets() -> None:
    register_secrets([BARE_PASSWORD])
    register_secrets([BARE_SECRET])
    assert BARE_PASSWORD in redact_text(BARE_PASSWORD)
    register_secrets(())
    assert redact_text(BARE_SECRET) == BARE_SECRET


@pytest.mark.parametrize(
    "text",
    [
        f"upstream said: token {KUBE_TOKEN} is not valid",
        f"Authorization failed for bearer {KUBE_TOKEN}",
        f"TOKEN {KUBE_TOKEN}",
        f"Bearer {KUBE_TOKEN}.",
    ],
)
def test_a_scheme_followed_by_a_credential_sized_value_is_redacted(text: str) -> None:
    assert KUBE_TOKEN not in redact_text(text)
    assert REDACTED in redact_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "token app--load-3- added to server-a",
        "a token of ours for alias web",
        "token short",
        "the bearer of bad news",
    ],
)
def test_prose_about_tokens_stays_readable(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize("output_format", ["json", "console"])
def test_no_registered_secret_nor_upstream_body_reaches_a_library_debug_line(
    output_format: LogFormat,
) -> None:
    """keystoneauth's debug response lines, as it writes them: the body goes, the mark stays."""
    stream = io.StringIO()
    configure_logging("debug", output_format, stream=stream)
    register_secrets([BARE_PASSWORD, KUBE_TOKEN])
    library = logging.getLogger("keystoneauth.session")
    library.debug("RESP BODY: %s", json.dumps({"error": {"message": f"password {BARE_PASSWORD} refused"}}))
    library.debug('RESP BODY: {"echo": "token %s"}', KUBE_TOKEN)
    library.debug(
        "GET call to compute for http://nova/v2.1/servers used request id req-1 (%s)", BARE_PASSWORD
    )
    get_logger("landb_webhook.test").warning("upstream failed", reason=f"bearer {KUBE_TOKEN}")
    output = stream.getvalue()
    assert BARE_PASSWORD not in output and KUBE_TOKEN not in output
    assert output.count(f"RESP BODY: {OMITTED_BODY}") == 2
    assert "refused" not in output and "echo" not in output
    assert "used request id req-1" in output


# --- Repeated warnings: at most once per period, bounded memory ----------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def said(logs: list[dict[str, object]], event: str) -> list[dict[str, object]]:
    return [entry for entry in logs if entry["event"] == event]


def test_a_repeated_warning_is_said_again_each_period_with_how_many_were_held_back() -> None:
    clock = Clock()
    warnings = RepeatLimitedLog(get_logger("test"), RepeatLimiter(60, clock=clock))

    with capture_logs() as logs:
        for _ in range(5):
            warnings.warning("app.cern.ch", "endpoint dropped", name="app.cern.ch")
            clock.now += 1
        clock.now += 60
        warnings.warning("app.cern.ch", "endpoint dropped", name="app.cern.ch")
        warnings.warning("app.cern.ch", "endpoint dropped", name="app.cern.ch")

    first, again = said(logs, "endpoint dropped")
    assert "held_back" not in first
    assert again["held_back"] == 4
    assert first["log_level"] == again["log_level"] == "warning"


def test_distinct_warnings_are_each_said_and_the_limiter_remembers_at_most_max_keys() -> None:
    clock = Clock()
    limiter = RepeatLimiter(60, max_keys=100, clock=clock)
    warnings = RepeatLimitedLog(get_logger("test"), limiter)

    with capture_logs() as logs:
        for index in range(10_000):
            warnings.warning(index, "endpoint dropped", name=f"n{index}.cern.ch")

    assert len(said(logs, "endpoint dropped")) == 100
    [overflow] = said(logs, "too many distinct warnings: some were not logged")
    assert overflow["not_logged"] == 1  # said at the first key over the cap, then once per period
    assert len(limiter) == 100

    clock.now += 60
    with capture_logs() as logs:
        warnings.warning("later", "endpoint dropped", name="later.cern.ch")

    assert len(said(logs, "endpoint dropped")) == 1
    [overflow] = said(logs, "too many distinct warnings: some were not logged")
    assert overflow["not_logged"] == 10_000 - 100 - 1
    assert len(limiter) <= 100


@given(
    st.lists(
        st.lists(st.one_of(_SECRETISH, st.text(max_size=8)), max_size=6).map("".join), min_size=3, max_size=8
    )
)
def test_a_list_of_texts_is_redacted_as_each_of_them_would_be(texts: list[str]) -> None:
    """A list is scanned once, joined, when that finds nothing; else text by text. (Two texts whose first
    names a secret are a header pair: the second is blanked whatever it is.)"""
    redacted = redact_secrets(None, "info", {"event": "written", "tokens": texts})
    assert redacted["tokens"] == [redact_text(text) for text in texts]


# -- redaction gaps (issue 36): quoted values with spaces, JSON-escaped forms, more secret keys ------------

QUOTED_SECRET = "correct horse battery staple"


@pytest.mark.parametrize(
    "text",
    [
        f'password = "{QUOTED_SECRET}"',  # a cloud.conf line, quoted
        f"password='{QUOTED_SECRET}'",
        f'{{"password": "{QUOTED_SECRET}", "user": "svc"}}',
        f'error: {{"auth": {{"password": "{QUOTED_SECRET}"}}}}',
    ],
)
def test_a_quoted_secret_is_redacted_whole_spaces_included(text: str) -> None:
    redacted = redact_text(text)
    assert not any(word in redacted for word in QUOTED_SECRET.split())
    assert REDACTED in redacted


@pytest.mark.parametrize(
    "text",
    [
        # A JSON document inside a JSON string, as an upstream error quoting a request body shows it:
        '"body": "{\\"password\\": \\"s3cr3t-pw\\", \\"user\\": \\"svc\\"}"',
        '"{\\"auth\\": {\\"application_credential_secret\\": \\"s3cr3t-pw\\"}}"',
        # ...and escaped twice.
        '{\\\\\\"password\\\\\\": \\\\\\"s3cr3t-pw\\\\\\"}',
    ],
)
def test_a_secret_in_a_json_escaped_document_is_redacted(text: str) -> None:
    redacted = redact_text(text)
    assert "s3cr3t-pw" not in redacted
    assert REDACTED in redacted


def test_a_registered_secret_is_redacted_in_its_json_escaped_form_too() -> None:
    secret = 'pa"ss\\word-with-quote'
    register_secrets([secret])
    try:
        escaped = json.dumps({"echo": secret})
        redacted = redact_text(f"nova said: {escaped}")
        assert 'pa\\"ss' not in redacted and "word-with-quote" not in redacted
        assert REDACTED in redacted
    finally:
        register_secrets(())


@pytest.mark.parametrize(
    "key", ["client-key-data", "client_key", "clientKeyData", "passcode", "OS_PASSCODE", "totp-passcode"]
)
def test_more_secret_keys(key: str) -> None:
    # client-key-data: a kubeconfig's private key; passcode: Keystone's TOTP.
    assert is_secret_key(key)


def test_a_kubeconfig_s_client_key_data_is_redacted_in_text() -> None:
    text = "invalid kubeconfig: {'client-key-data': 'LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t'}"
    assert "LS0tLS1CRUdJTi" not in redact_text(text)


# -- printable only --------------------------------------------------------------------------------------


@pytest.mark.parametrize("output_format", ["json", "console"])
def test_names_reach_a_log_line_printable_only(output_format: LogFormat) -> None:
    """A name comes from an Ingress anyone may write: a terminal escape, a newline that forges a second log
    line, or a right-to-left override must reach the log escaped, the rest of the line intact."""
    stream = io.StringIO()
    configure_logging("info", output_format, stream=stream)
    log = get_logger("landb_webhook.test")
    forged = "app\x1b[31m\nERROR forged line\u202egnp.cern.ch"

    log.warning(f"endpoint dropped: {forged}", name=forged, names=[forged, "ok.cern.ch"])

    output = stream.getvalue()
    assert output.count("\n") == 1  # one line
    assert not any(character in output for character in ("\x1b", "\u202e", "\r"))
    assert "\\x1b[31m" in output.replace("\\\\", "\\") and "ok.cern.ch" in output
    assert "\\u202e" in output.replace("\\\\", "\\")
