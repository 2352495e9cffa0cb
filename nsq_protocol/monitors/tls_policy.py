"""The broker's TLS flags (--tls-required, --tls-client-auth-policy, --tls-min-version): told where whoever runs the
judge knows them (the suite, from its profile), else shown by what they make the broker do, which holds until a
restart may have changed them."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from nsq_protocol.tls_records import VERSION_NAMES

VERSIONS = {name: version for version, name in VERSION_NAMES.items()}  # --tls-min-version's values
WITNESSES_TRIED = 1000  # the newest connections looked at for one still open: a bound per witness lost, not all of them
RESTARTED = "no V2 connection lived from what showed the policy until then: a restart may have changed the flags"


@dataclass(frozen=True)
class TlsPolicy:
    required: str | None = None  # --tls-required: "true" (TCP and HTTP), "tcp-https" (TCP only); None: not required
    client_auth: str | None = None  # --tls-client-auth-policy: "require", "require-verify"; None: no certificate asked
    min_version_name: str | None = None  # --tls-min-version: "tls1.2", "tls1.3"; None: not told

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

    @property
    def min_version(self) -> int | None:
        return VERSIONS.get(self.min_version_name) if self.min_version_name else None


@dataclass
class Shown:
    """What the broker showed of a flag at ``ts`` (``evidence``, ``value``). It holds while a V2 connection open then is
    open still (a restart, with other flags perhaps, would have ended it): ``witness`` names the one last found."""

    ts: float
    evidence: str
    value: object = None
    witness: str | None = None

    def holds(self, judge, now: float) -> bool:
        """False once no connection open at ``ts`` is open at ``now``; it stays False (those opened since cannot
        have lived through ``ts``), so the caller forgets it."""
        witness = judge.connections.get(self.witness) if self.witness is not None else None
        if witness is not None and witness.lived_through(self.ts) and not witness.unseen_at(now):
            return True
        newest = islice(reversed(judge.connections.values()), WITNESSES_TRIED)
        self.witness = next((c.name for c in newest if c.lived_through(self.ts) and not c.unseen_at(now)), None)
        return self.witness is not None
