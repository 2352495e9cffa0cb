"""The broker's TLS flags (--tls-required, --tls-client-auth-policy, --tls-min-version), where whoever runs the judge
knows them (the suite, from its profile): the traffic does not carry them, only what they make the broker do."""

from __future__ import annotations

from dataclasses import dataclass

TLS13 = "tls1.3"


@dataclass(frozen=True)
class TlsPolicy:
    required: str | None = None  # --tls-required: "true" (TCP and HTTP), "tcp-https" (TCP only); None: not required
    client_auth: str | None = None  # --tls-client-auth-policy: "require", "require-verify"; None: no certificate asked
    min_version: str | None = None  # --tls-min-version: "tls1.2", "tls1.3"; None: Go's default (TLS 1.2 for servers)

    @classmethod
    def of(cls, capabilities: dict) -> TlsPolicy:
        """From a profile's capabilities (conformance/profiles/*.toml: tls_required, tls_client_auth,
        tls_min_version)."""
        def named(key: str) -> str | None:
            value = capabilities.get(key)
            return value if isinstance(value, str) and value not in ("", "false") else None
        return cls(named("tls_required"), named("tls_client_auth"), named("tls_min_version"))

    @property
    def plain_http_refused(self) -> bool:
        """nsqd/nsqd.go New: a client auth policy without --tls-required sets it to true, TCP and HTTP (T-12)."""
        return self.required == "true" or (self.required is None and self.client_auth is not None)

    @property
    def plain_tcp_refused(self) -> bool:
        """Either value of --tls-required, or a client auth policy (T-12), refuses plain TCP commands (T-07)."""
        return self.required is not None or self.client_auth is not None
