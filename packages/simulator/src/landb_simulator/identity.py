"""Keystone's side of the simulator: one domain, one project, a few users, tokens that expire.

The users cover what the tests need to prove about authorisation: a normal member (the webhook's own
account), a reader whose writes Nova refuses, and an admin. An application credential and a trust let the
client configurations CERN actually uses (``v3applicationcredential``, ``v3password`` + ``trust_id``) run
against the simulator unchanged.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

DOMAIN_ID = "default"
DOMAIN_NAME = "Default"
PROJECT_NAME = "landb-webhook-simulator"
REGION = "cern"

CATALOG_SERVICES = ("identity", "compute", "image", "load-balancer", "network")
"""The service types of the simulated catalog, in its order."""

MEMBER = "member"
READER = "reader"
ADMIN = "admin"

_NAMESPACE = uuid.UUID("5b0e7a8e-1f7c-4a55-9d1e-3c2f6f0b6d10")


def _stable_id(kind: str, name: str) -> str:
    """Keystone ids are 32 hex digits; derive them from names so every run shows the same ids."""
    return uuid.uuid5(_NAMESPACE, f"{kind}:{name}").hex


PROJECT_ID = _stable_id("project", PROJECT_NAME)


@dataclass(frozen=True)
class User:
    id: str
    name: str
    password: str
    roles: frozenset[str]


@dataclass(frozen=True)
class ApplicationCredential:
    id: str
    name: str
    secret: str
    user_id: str
    roles: frozenset[str]


@dataclass(frozen=True)
class Trust:
    id: str
    trustor_user_id: str
    trustee_user_id: str
    project_id: str
    roles: frozenset[str]


@dataclass(frozen=True)
class Token:
    value: str
    user: User
    project_id: str
    roles: frozenset[str]
    methods: tuple[str, ...]
    issued_at: float
    expires_at: float
    audit_id: str
    application_credential: ApplicationCredential | None = None
    trust: Trust | None = None

    def can_read(self) -> bool:
        return bool(self.roles & {READER, MEMBER, ADMIN})

    def can_write(self) -> bool:
        return bool(self.roles & {MEMBER, ADMIN})

    def is_admin(self) -> bool:
        return ADMIN in self.roles


@dataclass(frozen=True)
class Credentials:
    """Everything a client needs to log in; the secrets are random per simulator instance."""

    domain_name: str
    project_name: str
    project_id: str
    username: str
    user_id: str
    password: str
    reader_username: str
    reader_password: str
    admin_username: str
    admin_password: str
    application_credential_id: str
    application_credential_name: str
    application_credential_secret: str
    trust_id: str
    kubernetes_token: str

    def __repr__(self) -> str:
        return f"Credentials(project={self.project_name!r}, username={self.username!r}, secrets=<hidden>)"


class AuthError(Exception):
    """A refused authentication; ``status`` is what Keystone answers (400 malformed, 401 refused)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_UNAUTHORIZED = "The request you have made requires authentication."


class IdentityStore:
    """Users, credentials and issued tokens, guarded by the simulator's lock."""

    def __init__(self, lock: threading.RLock, *, clock: Callable[[], float] = time.time) -> None:
        self._lock = lock
        self._clock = clock
        self._token_ttl = 3600.0
        self._catalog_without: frozenset[str] = frozenset()
        self._tokens: dict[str, Token] = {}
        member = User(
            _stable_id("user", "landb-webhook"),
            "landb-webhook",
            secrets.token_urlsafe(18),
            frozenset({MEMBER, READER}),
        )
        reader = User(
            _stable_id("user", "landb-reader"), "landb-reader", secrets.token_urlsafe(18), frozenset({READER})
        )
        admin = User(
            _stable_id("user", "cloud-admin"),
            "cloud-admin",
            secrets.token_urlsafe(18),
            frozenset({ADMIN, MEMBER, READER}),
        )
        self._users = {user.id: user for user in (member, reader, admin)}
        self._app_credential = ApplicationCredential(
            id=_stable_id("application-credential", "landb-webhook"),
            name="landb-webhook",
            secret=secrets.token_urlsafe(24),
            user_id=member.id,
            roles=member.roles,
        )
        # As on Magnum: the cluster's trustee user acts in the project through a trust from its owner.
        self._trust = Trust(
            id=_stable_id("trust", "landb-webhook"),
            trustor_user_id=admin.id,
            trustee_user_id=member.id,
            project_id=PROJECT_ID,
            roles=frozenset({MEMBER, READER}),
        )
        self.credentials = Credentials(
            domain_name=DOMAIN_NAME,
            project_name=PROJECT_NAME,
            project_id=PROJECT_ID,
            username=member.name,
            user_id=member.id,
            password=member.password,
            reader_username=reader.name,
            reader_password=reader.password,
            admin_username=admin.name,
            admin_password=admin.password,
            application_credential_id=self._app_credential.id,
            application_credential_name=self._app_credential.name,
            application_credential_secret=self._app_credential.secret,
            trust_id=self._trust.id,
            kubernetes_token=secrets.token_urlsafe(24),
        )

    # -- settings --------------------------------------------------------------------------------------

    @property
    def token_ttl(self) -> float:
        with self._lock:
            return self._token_ttl

    @token_ttl.setter
    def token_ttl(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError("token_ttl must be positive")
        with self._lock:
            self._token_ttl = float(seconds)

    @property
    def catalog_without(self) -> frozenset[str]:
        """Service types the catalog leaves out (``{"load-balancer"}``: a cloud without Octavia, as a
        Nova-only cloud is); tokens issued afterwards carry the catalog without them."""
        with self._lock:
            return self._catalog_without

    @catalog_without.setter
    def catalog_without(self, service_types: Iterable[str]) -> None:
        left_out = frozenset(service_types)
        unknown = left_out - set(CATALOG_SERVICES) | (left_out & {"identity"})
        if unknown:
            raise ValueError(
                f"cannot leave {sorted(unknown)} out of the catalog; these can: {CATALOG_SERVICES[1:]}"
            )
        with self._lock:
            self._catalog_without = left_out

    def expire_tokens(self) -> int:
        """Make every issued token invalid at once, as a Keystone restart or revocation would."""
        with self._lock:
            count = len(self._tokens)
            self._tokens.clear()
            return count

    def issued(self) -> list[str]:
        """The values of the tokens issued and not yet revoked or found expired, oldest first: what a
        test looks for in logs and answers, where no token may appear."""
        with self._lock:
            return list(self._tokens)

    def revoke(self, value: str) -> None:
        with self._lock:
            self._tokens.pop(value, None)

    def user(self, user_id: str) -> User:
        with self._lock:
            return self._users[user_id]

    # -- tokens ----------------------------------------------------------------------------------------

    def validate(self, value: str | None) -> Token | None:
        """The live token with this value, or None when it is unknown or expired."""
        if not value:
            return None
        with self._lock:
            token = self._tokens.get(value)
            if token is None:
                return None
            if token.expires_at <= self._clock():
                del self._tokens[value]
                return None
            return token

    def authenticate(self, body: object) -> Token:
        """Issue a token for a ``POST /v3/auth/tokens`` body, or raise AuthError."""
        auth = _mapping(_mapping(body, "body").get("auth"), "auth")
        identity = _mapping(auth.get("identity"), "auth.identity")
        methods = identity.get("methods")
        if not isinstance(methods, list) or not methods or not all(isinstance(m, str) for m in methods):
            raise AuthError(400, "Expecting to find methods in identity")
        scope = auth.get("scope")
        with self._lock:
            app_credential: ApplicationCredential | None = None
            if "application_credential" in methods:
                app_credential = self._check_application_credential(
                    _mapping(identity.get("application_credential"), "application_credential")
                )
                user = self._users[app_credential.user_id]
            elif "password" in methods:
                user = self._check_password(_mapping(identity.get("password"), "password"))
            elif "token" in methods:
                previous = self.validate(_mapping(identity.get("token"), "token").get("id"))
                if previous is None:
                    raise AuthError(401, _UNAUTHORIZED)
                user = previous.user
            else:
                raise AuthError(401, f"Unsupported authentication method: {', '.join(methods)}")
            project_id, roles, trust = self._resolve_scope(user, scope, app_credential)
            now = self._clock()
            token = Token(
                value=secrets.token_hex(32),
                user=user,
                project_id=project_id,
                roles=roles,
                methods=tuple(methods),
                issued_at=now,
                expires_at=now + self._token_ttl,
                audit_id=secrets.token_urlsafe(16),
                application_credential=app_credential,
                trust=trust,
            )
            self._tokens[token.value] = token
            return token

    def _find_user(self, spec: Mapping[str, Any]) -> User:
        user_id = spec.get("id")
        if isinstance(user_id, str):
            user = self._users.get(user_id)
            if user is None:
                raise AuthError(401, _UNAUTHORIZED)
            return user
        name = spec.get("name")
        if not isinstance(name, str):
            raise AuthError(400, "Expecting to find id or name in user")
        domain = _mapping(spec.get("domain"), "user.domain")
        if "id" not in domain and "name" not in domain:
            raise AuthError(400, "Expecting to find domain in user")
        if domain.get("id", DOMAIN_ID) != DOMAIN_ID or domain.get("name", DOMAIN_NAME) != DOMAIN_NAME:
            raise AuthError(401, _UNAUTHORIZED)
        for user in self._users.values():
            if user.name == name:
                return user
        raise AuthError(401, _UNAUTHORIZED)

    def _check_password(self, password: Mapping[str, Any]) -> User:
        spec = _mapping(password.get("user"), "password.user")
        user = self._find_user(spec)
        if not secrets.compare_digest(str(spec.get("password", "")), user.password):
            raise AuthError(401, _UNAUTHORIZED)
        return user

    def _check_application_credential(self, spec: Mapping[str, Any]) -> ApplicationCredential:
        credential = self._app_credential
        if "id" in spec:
            known = spec["id"] == credential.id
        elif "name" in spec:
            owner = self._find_user(_mapping(spec.get("user"), "application_credential.user"))
            known = spec["name"] == credential.name and owner.id == credential.user_id
        else:
            raise AuthError(400, "Expecting to find id or name in application_credential")
        if not known or not secrets.compare_digest(str(spec.get("secret", "")), credential.secret):
            raise AuthError(401, _UNAUTHORIZED)
        return credential

    def _resolve_scope(
        self, user: User, scope: object, app_credential: ApplicationCredential | None
    ) -> tuple[str, frozenset[str], Trust | None]:
        if app_credential is not None:
            if scope not in (None, "unscoped"):
                raise AuthError(401, "Application credentials cannot request a scope.")
            return PROJECT_ID, app_credential.roles, None
        if scope is None or scope == "unscoped":
            # Keystone scopes to the default project; every simulated user has this one project.
            return PROJECT_ID, user.roles, None
        scope_map = _mapping(scope, "scope")
        if "OS-TRUST:trust" in scope_map:
            trust_id = _mapping(scope_map["OS-TRUST:trust"], "scope.OS-TRUST:trust").get("id")
            trust = self._trust
            if trust_id != trust.id or user.id != trust.trustee_user_id:
                raise AuthError(401, _UNAUTHORIZED)
            return trust.project_id, trust.roles, trust
        if "project" in scope_map:
            project = _mapping(scope_map["project"], "scope.project")
            if "id" in project:
                matches = project["id"] == PROJECT_ID
            else:
                domain = _mapping(project.get("domain"), "scope.project.domain")
                matches = (
                    project.get("name") == PROJECT_NAME
                    and ("id" in domain or "name" in domain)
                    and domain.get("id", DOMAIN_ID) == DOMAIN_ID
                    and domain.get("name", DOMAIN_NAME) == DOMAIN_NAME
                )
            if not matches:
                raise AuthError(401, _UNAUTHORIZED)
            return PROJECT_ID, user.roles, None
        raise AuthError(401, "Only project and trust scopes are simulated.")


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise AuthError(400, f"Expecting to find {where} in request body")
    return value
