"""AUTH against an external auth server (internal/auth/authorizations.go; P-AUTH-06, P-AUTH-07, P-AUTH-08, P-AUTH-09,
P-AUTH-10, P-AUTH-11, P-AUTH-12, P-AUTH-13).

The auth server answers `{"ttl", "identity", "identity_url", "authorizations": [{"topic", "channels",
"permissions"}]}`; topic and channel patterns are unanchored regular expressions (P-AUTH-11).
"""
from __future__ import annotations

import json
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass


class AuthError(Exception):
    """The auth server could not be asked, or its answer was not usable: E_AUTH_FAILED (P-AUTH-06)."""


@dataclass(frozen=True)
class Authorization:
    topic: re.Pattern
    channels: tuple[re.Pattern, ...]
    permissions: frozenset[str]

    def is_allowed(self, topic: str, channel: str) -> bool:
        """Publishes ask with channel "" and need `publish`; SUB needs `subscribe` (P-AUTH-11)."""
        if ("subscribe" if channel else "publish") not in self.permissions:
            return False
        return bool(self.topic.search(topic)) and any(c.search(channel) for c in self.channels)


@dataclass(frozen=True)
class AuthState:
    identity: str
    identity_url: str
    authorizations: tuple[Authorization, ...]
    expires: float  # time.monotonic()

    @property
    def expired(self) -> bool:
        return self.expires < time.monotonic()

    def is_allowed(self, topic: str, channel: str) -> bool:
        return any(a.is_allowed(topic, channel) for a in self.authorizations)


def query_any_authd(options, remote_ip: str, tls: bool, common_name: str, secret: str) -> AuthState:
    """Ask each configured auth server, starting at a random one, until one answers (P-AUTH-13)."""
    addresses = options.auth_http_addresses
    start = random.randrange(len(addresses))
    failures = []
    for address in addresses[start:] + addresses[:start]:
        try:
            return _query_authd(options, address, remote_ip, tls, common_name, secret)
        except AuthError as error:
            failures.append(f"failed to auth against {address} - {error}")
    raise AuthError("; ".join(failures))


def _query_authd(options, address: str, remote_ip: str, tls: bool, common_name: str, secret: str) -> AuthState:
    fields = {"common_name": common_name, "remote_ip": remote_ip, "secret": secret, "tls": "true" if tls else "false"}
    endpoint = address if "://" in address else f"http://{address}/auth"
    headers = {"Accept": "application/vnd.nsq; version=1.0"}
    if options.auth_http_request_method == "post":
        body = json.dumps({k: [v] for k, v in fields.items()}, separators=(",", ":")).encode()
        request = urllib.request.Request(endpoint, data=body, method="POST",
                                         headers={**headers, "Content-Type": "application/json"})
    else:
        request = urllib.request.Request(f"{endpoint}?{urllib.parse.urlencode(fields)}", headers=headers)
    timeout = (options.http_client_connect_timeout + options.http_client_request_timeout) / 1e9
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            document = json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise AuthError(f"got response {error.code}") from None
    except (OSError, ValueError) as error:
        raise AuthError(str(error)) from None
    return _auth_state(document)


def _auth_state(document) -> AuthState:
    if not isinstance(document, dict):
        raise AuthError("invalid auth reply")
    fields = {key.lower(): value for key, value in document.items()}
    authorizations = []
    for entry in fields.get("authorizations") or []:
        entry = {key.lower(): value for key, value in entry.items()} if isinstance(entry, dict) else {}
        permissions = entry.get("permissions") or []
        unknown = set(permissions) - {"subscribe", "publish"}
        if unknown:
            raise AuthError(f"unknown permission {sorted(unknown)[0]}")
        try:
            authorizations.append(Authorization(
                re.compile(entry.get("topic") or ""),
                tuple(re.compile(c) for c in entry.get("channels") or []),
                frozenset(permissions)))
        except (re.error, TypeError) as error:
            raise AuthError(f"unable to compile {error}") from None
    ttl = fields.get("ttl")
    if type(ttl) is not int or ttl <= 0:
        raise AuthError(f"invalid TTL {ttl} (must be >0)")
    return AuthState(str(fields.get("identity") or ""), str(fields.get("identity_url") or ""),
                     tuple(authorizations), time.monotonic() + ttl)
