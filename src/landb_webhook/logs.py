"""Logging: structlog for our own lines, the same renderer for stdlib loggers, secrets scrubbed from both.

Call :func:`configure_logging` once at start-up. Our loggers (``landb_webhook.*``) log at the configured
level; libraries (uvicorn, openstacksdk, keystoneauth, kubernetes, urllib3) only from WARNING unless the
level is ``debug``. Every line, ours or a library's, passes :func:`redact_secrets` last before rendering.

Patterns recognise a secret by its surroundings (``password=``, ``X-Auth-Token:``, ``Bearer``, a token's
shape); a quoted value is taken whole, spaces included, and a JSON document escaped inside a string
(``{\"password\": \"x\"}``) is read as one. An upstream body that echoes a bare password has no
surroundings: so the configured credentials are also redacted by value, in their JSON-escaped form too:
:func:`register_secrets` is called once at start-up with them (wiring.build_adapters), and every text logged
or answered is scrubbed of them. Response bodies keystoneauth logs at debug (``RESP BODY:``) are omitted
whole: an upstream body is never a log line.

Every text of a log line is printable only (:func:`printable`): a name comes from an Ingress anyone may
write, and a terminal escape or a newline in it must not recolour a terminal or forge a second line.

keystoneauth's warnings are logged at debug (:data:`DEMOTED_LOGGERS`): each failed authentication warns
once per request it tried (``Failed to discover available identity versions ...``), ~5 lines per failed
call with its retries, while the OpenStack adapter says each Keystone outage once, when it starts and
when it ends.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import Processor

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["json", "console"]

REDACTED = "[REDACTED]"

_HANDLER_NAME = "landb-webhook"
_OWN_LOGGER = "landb_webhook"
DEMOTED_LOGGERS = ("keystoneauth",)
"""Libraries whose warnings are logged at debug: what they warn of, an adapter reports itself."""

_SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "passcode", "secret", "authorization", "cookie", "apikey"}
)
# client-key(-data): a kubeconfig's private key; passcode: Keystone's TOTP.
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("client", "key"), ("set", "cookie")})
# "token" alone or after one of these: X-Auth-Token, X-Subject-Token, access_token... but not the
# landb `--load-N-` tokens (load_token, alias_tokens), which are what the logs are about.
_TOKEN_KINDS = frozenset(
    {"auth", "access", "refresh", "id", "subject", "bearer", "session", "api", "service"}
)
_KEY_SEGMENTS = re.compile(r"[-_. ]+")
_CAMEL_CASE_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SCHEME = r"(?:Bearer|Basic|Token|Negotiate)\s+"
_KEY_VALUE = re.compile(
    # `password=x`, `X-Auth-Token: x`, `'secret': 'x'`, `"Authorization": "Bearer x"`, `?token=x&`, and
    # the same JSON-escaped once or more: `\"password\": \"x\"`.
    r"(?P<key>[A-Za-z][\w.-]*)"
    r"(?P<sep>(?:\\*[\"'])?\s*[:=]\s*)"
    r"(?:"
    # a quoted value, whole: up to its closing quote, spaces and escaped quotes included
    r"(?P<open>\\*[\"'])(?P<qscheme>" + _SCHEME + r")?"
    r"(?P<quoted>(?:\\.|[^\\]){0,4096}?)(?P=open)"
    # else up to a delimiter; keystoneauth logs hashed tokens as `{SHA256}<hex>`: the braces belong to it.
    r"|(?P<bare_open>[\"'])?(?P<scheme>" + _SCHEME + r")?"
    r"(?P<value>(?:\{[A-Za-z0-9]+\})?[^\s\"',;&)}\]]+)"
    r")",
)
_SECRET_SHAPES = (
    re.compile(r"\bgAAAAA[\w-]{20,}={0,2}"),  # Keystone Fernet token
    re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*"),  # JWT (Kubernetes service account token)
)
_URL_PASSWORD = re.compile(r"(?P<prefix>://[^/\s:@]+:)[^/\s@]+@")
_SCHEME_VALUE = re.compile(
    # `token abc...`, `Bearer abc...` without a separator: only a credential-sized value, so that prose
    # ("token of", a landb `app--load-3-` token) stays readable.
    r"(?i)\b(?P<scheme>bearer|basic|negotiate|token)\s+(?P<value>(?![\w.~+/=-]*--load-)[\w.~+/=-]{16,})"
)
_SCHEME_WORDS = ("bearer", "basic", "negotiate", "token")
MIN_SECRET_LENGTH = 4
"""Registered values shorter than this are not searched for: they would blank ordinary words."""
_BODY_MARK = "RESP BODY:"
OMITTED_BODY = "[upstream body omitted]"


class _SecretValues:
    """The registered secrets, and one pattern finding any of them (longest first)."""

    values: frozenset[str] = frozenset()
    forms: frozenset[str] = frozenset()
    """The values and their JSON-escaped forms (once and twice), what ``pattern`` finds."""
    pattern: re.Pattern[str] | None = None


_secret_values = _SecretValues()
_SECRET_MARKS = (":", "=", "gAAAAA", "eyJ")
"""Every form above contains one of these: a text holding none (alias values, names) has nothing to hide,
and skipping the scans matters: an apply logs every value it writes, thousands of characters per server."""


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether a value logged under ``key`` (a field, header or parameter name) must be hidden.

    Answered once per distinct key: a log line of an apply's values asks it for each of ~30 keys."""
    words = _CAMEL_CASE_BOUNDARY.sub("_", key).lower()  # clientSecret -> client_secret
    segments = [segment for segment in _KEY_SEGMENTS.split(words) if segment]
    if _SECRET_WORDS.intersection(segments):
        return True
    pairs = set(itertools.pairwise(segments))
    if _SECRET_PAIRS & pairs:
        return True
    return bool(segments) and segments[-1] == "token" and (len(segments) == 1 or segments[-2] in _TOKEN_KINDS)


def _redact_assignment(match: re.Match[str]) -> str:
    key, sep, opening = match["key"], match["sep"], match["open"]
    if opening is not None:  # a quoted value
        if not is_secret_key(key):  # it may quote a secret of its own: `message: "bad password='x'"`
            quoted = _KEY_VALUE.sub(_redact_assignment, match["quoted"])
            return f"{key}{sep}{opening}{match['qscheme'] or ''}{quoted}{opening}"
        return f"{key}{sep}{opening}{match['qscheme'] or ''}{REDACTED}{opening}"
    if not is_secret_key(key):
        return match[0]
    return f"{key}{sep}{match['bare_open'] or ''}{match['scheme'] or ''}{REDACTED}"


def register_secrets(values: Iterable[str | None]) -> None:
    """From now on, redact these values wherever they appear (the configured credentials: passwords,
    application credential secrets, tokens, the Kubernetes bearer token). Replaces what was registered."""
    kept = frozenset(value for value in values if value and len(value) >= MIN_SECRET_LENGTH)
    forms = set(kept)
    for value in kept:  # a body echoing the value as a JSON string (once, or inside another one) escapes it
        once = json.dumps(value)[1:-1]
        forms.update((once, json.dumps(once)[1:-1]))
    longest_first = sorted(forms, key=len, reverse=True)
    _secret_values.values = kept
    _secret_values.forms = frozenset(forms)
    _secret_values.pattern = re.compile("|".join(map(re.escape, longest_first))) if kept else None


def registered_secrets() -> frozenset[str]:
    return _secret_values.values


def _redact_registered(text: str) -> str:
    # `in` first: a substring search is far cheaper than the pattern's alternation, and usually fails.
    pattern = _secret_values.pattern
    if pattern is None or not any(form in text for form in _secret_values.forms):
        return text
    return pattern.sub(REDACTED, text)


def _may_hold_scheme_value(text: str) -> bool:
    """Whether ``_SCHEME_VALUE`` can match: its case-insensitive scan costs ~40 times a lower-cased search."""
    lowered = text.lower()
    return any(word in lowered for word in _SCHEME_WORDS)


def redact_text(text: str) -> str:
    """``text`` with every registered secret and every secret-looking value replaced by ``[REDACTED]``."""
    text = _redact_registered(text)
    may_hold_scheme_value = _may_hold_scheme_value(text)
    if not any(mark in text for mark in _SECRET_MARKS) and not (
        may_hold_scheme_value and _SCHEME_VALUE.search(text)
    ):
        return text
    return _redact_forms(text, may_hold_scheme_value)


def redact_every_form(text: str) -> str:
    """``redact_text`` without its shortcut: every secret form looked for in ``text``."""
    text = _redact_registered(text)
    return _redact_forms(text, _may_hold_scheme_value(text))


def _redact_forms(text: str, may_hold_scheme_value: bool) -> str:
    """Every pattern form of a secret, in ``text`` whose registered values are already redacted."""
    if may_hold_scheme_value:
        text = _SCHEME_VALUE.sub(lambda match: f"{match['scheme']} {REDACTED}", text)
    text = _KEY_VALUE.sub(_redact_assignment, text)
    for shape in _SECRET_SHAPES:
        text = shape.sub(REDACTED, text)
    return _URL_PASSWORD.sub(lambda match: f"{match['prefix']}{REDACTED}@", text)


def _redact(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {
            key: REDACTED if isinstance(key, str) and is_secret_key(key) else _redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        if len(items) == 2 and isinstance(items[0], str) and is_secret_key(items[0]):
            return [items[0], REDACTED]  # a (name, value) header pair
        if len(items) > 2 and all(isinstance(item, str) for item in items):
            # One scan of them all, joined where no secret form can cross (a form that crosses is a
            # change, and then each is scanned): a write's log line lists a server's 1,000 tokens.
            joined = ",".join(items)
            if redact_text(joined) == joined:
                return items
        return [_redact(item) for item in items]
    return value


_KEPT_IN_TRACEBACKS = frozenset({"exception", "stack"})
"""Fields whose newlines and tabs are their layout (a traceback): only other characters are escaped."""


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character that is not printable (controls, escapes, line and paragraph
    separators, bidirectional overrides, zero-width characters) written as its Python escape, ``\x1b``,
    ``\u202e``; ``keep``: characters left as they are."""
    if text.isprintable():
        return text
    return "".join(
        character if character.isprintable() or character in keep else _escaped(character)
        for character in text
    )


def _escaped(character: str) -> str:
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, Mapping):
        return {_printable(key): _printable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        if all(isinstance(item, str) and item.isprintable() for item in items):
            return items  # a write's 1,000 tokens: one pass, nothing to escape
        return [_printable(item) for item in items]
    return value


def printable_only(_logger: object, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """structlog processor: every text of the line printable only (:func:`printable`); a traceback keeps
    its newlines."""
    return {
        key: printable(value, "\n\t")
        if key in _KEPT_IN_TRACEBACKS and isinstance(value, str)
        else _printable(value)
        for key, value in event_dict.items()
    }


def omit_upstream_bodies(_logger: object, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """structlog processor: a response body keystoneauth logs at debug keeps its mark, loses its text."""
    event = event_dict.get("event")
    if isinstance(event, str) and _BODY_MARK in event:
        event_dict["event"] = f"{event[: event.index(_BODY_MARK) + len(_BODY_MARK)]} {OMITTED_BODY}"
    return event_dict


def redact_secrets(_logger: object, _method: str, event_dict: MutableMapping[str, Any]) -> Any:
    """structlog processor: blank every value under a secret-sounding key and every secret-looking text.

    Runs after exceptions are formatted, so tracebacks and library messages are scrubbed as well.
    """
    return {
        key: REDACTED if key != "event" and is_secret_key(key) else _redact(value)
        for key, value in event_dict.items()
    }


def configure_logging(level: LogLevel, log_format: LogFormat, *, stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging to one handler on ``stream`` (stderr by default); ``level`` and
    ``log_format`` are LANDB_LOG_LEVEL's and LANDB_LOG_FORMAT's.

    Calling it again replaces the previous configuration (tests do).
    """
    output = stream if stream is not None else sys.stderr
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: a logger bound at import time must follow a later configure_logging().
        cache_logger_on_first_use=False,
    )
    renderer: Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=output.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            omit_upstream_bodies,
            redact_secrets,
            printable_only,
            renderer,
        ],
    )
    handler = logging.StreamHandler(output)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(formatter)
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    handler.addFilter(_DemotedWarnings(show=numeric_level == logging.DEBUG))

    root = logging.getLogger()
    for previous in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(numeric_level if numeric_level == logging.DEBUG else logging.WARNING)
    logging.getLogger(_OWN_LOGGER).setLevel(numeric_level)


class _DemotedWarnings(logging.Filter):
    """A warning of a :data:`DEMOTED_LOGGERS` library becomes a debug line: shown only at debug level."""

    def __init__(self, *, show: bool) -> None:
        super().__init__()
        self._show = show

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not record.name.startswith(DEMOTED_LOGGERS):
            return True
        if not self._show:
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger backed by the stdlib logger ``name`` (use ``__name__``)."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger


REPEAT_PERIOD_SECONDS = 3600.0
"""How often one repeated warning (the same dropped name, the same refused Host) is said again."""
REPEAT_KEYS = 4096
"""How many distinct warnings :class:`RepeatLimiter` remembers: its memory is bounded whatever the input."""


@dataclass
class _Said:
    at: float
    held_back: int = 0


class RepeatLimiter:
    """Lets each key through at most once per ``period`` seconds and counts what it held back meanwhile.

    A persistent problem is thus said again every period, not once per process lifetime, and a flood of
    distinct keys costs at most ``max_keys`` entries: past that, new keys are held back (and counted in
    :attr:`overflow`) until old entries expire. Thread-safe: provider calls run in worker threads.
    """

    def __init__(
        self,
        period: float = REPEAT_PERIOD_SECONDS,
        *,
        max_keys: int = REPEAT_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.period = period
        self.max_keys = max_keys
        self._clock = clock
        self._said: OrderedDict[Hashable, _Said] = OrderedDict()  # oldest ``at`` first
        self._lock = threading.Lock()
        self.overflow = 0
        """New keys held back because the table was full, since the overflow was last reported."""
        self._overflow_said_at: float | None = None

    def __len__(self) -> int:
        """How many keys it remembers now."""
        return len(self._said)

    def admit(self, key: Hashable) -> int | None:
        """None to hold ``key`` back; else how many times it was held back since it was last let through."""
        now = self._clock()
        with self._lock:
            said = self._said.get(key)
            if said is not None and now - said.at < self.period:
                said.held_back += 1
                return None
            if said is None and not self._make_room(now):
                self.overflow += 1
                return None
            held_back = said.held_back if said is not None else 0
            self._said[key] = _Said(now)
            self._said.move_to_end(key)
            return held_back

    def take_overflow(self) -> int | None:
        """The count of keys held back for want of room, at most once per period; None if not due."""
        now = self._clock()
        with self._lock:
            due = self._overflow_said_at is None or now - self._overflow_said_at >= self.period
            if not self.overflow or not due:
                return None
            taken, self.overflow, self._overflow_said_at = self.overflow, 0, now
            return taken

    def _make_room(self, now: float) -> bool:
        while len(self._said) >= self.max_keys:
            oldest = next(iter(self._said.values()))
            if now - oldest.at < self.period:
                return False
            self._said.popitem(last=False)
        return True


class RepeatLimitedLog:
    """A warning said at most once per period per key, with ``held_back=N`` when repeats were skipped."""

    def __init__(self, logger: Any, limiter: RepeatLimiter | None = None) -> None:
        """``logger``: any structlog logger (a bound one, or the lazy proxy of ``structlog.get_logger``)."""
        self._logger = logger
        self.limiter = limiter if limiter is not None else RepeatLimiter()

    def warning(self, key: Hashable, event: str, **fields: object) -> None:
        self._say(self._logger.warning, key, event, fields)

    def error(self, key: Hashable, event: str, **fields: object) -> None:
        self._say(self._logger.error, key, event, fields)

    def _say(self, log: Callable[..., Any], key: Hashable, event: str, fields: dict[str, object]) -> None:
        held_back = self.limiter.admit(key)
        if held_back is not None:
            if held_back:
                fields["held_back"] = held_back
            fields.setdefault("repeats_at_most_every_s", self.limiter.period)
            log(event, **fields)
        overflow = self.limiter.take_overflow()
        if overflow is not None:
            self._logger.warning(
                "too many distinct warnings: some were not logged",
                not_logged=overflow,
                remembered=self.limiter.max_keys,
            )
