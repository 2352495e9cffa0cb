"""TLS as nsqd does it (section 11 of the behaviour catalogue; nsqd.go buildTLSConfig, client_v2.go UpgradeTLS):
the server context from the `--tls-*` flags, and a connection's TLS layer after IDENTIFY's `tls_v1`.

The layer is an ssl.SSLObject over two memory BIOs, so it never touches the socket: the handshake is driven by
the connection's thread with nsqd's 5 s deadline; afterwards `encrypt` is one more output layer (after snappy or
deflate, which run inside TLS, T-02, T-03) and `feed`/`read` one more input decoder, like compression's. One
lock serialises the SSL object, which OpenSSL does not let two threads use at once; it is never held across a
socket operation."""
from __future__ import annotations

import ctypes
import socket
import ssl
import threading
import time

from .compression import StreamError

HANDSHAKE_TIMEOUT = 5.0  # seconds: UpgradeTLS's SetDeadline
_VERSION_NAMES = {"TLSv1": "TLS1.0", "TLSv1.1": "TLS1.1", "TLSv1.2": "TLS1.2", "TLSv1.3": "TLS1.3"}
# nsqd's prettyConnectionState.GetCipherSuite names these; any other suite is "Unknown <id>" (T-04).
_NSQD_CIPHER_NAMES = {
    0x0005: "TLS_RSA_WITH_RC4_128_SHA", 0x000A: "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    0x002F: "TLS_RSA_WITH_AES_128_CBC_SHA", 0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
    0xC007: "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", 0xC009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    0xC00A: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", 0xC011: "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    0xC012: "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", 0xC013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    0xC014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", 0xC02F: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    0xC02B: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
}


class TLSConfigError(Exception):
    """nsqd's "failed to build TLS config - <err>"."""


def server_context(options) -> ssl.SSLContext | None:
    """buildTLSConfig: None without --tls-cert and --tls-key. The client auth policy: none by default;
    `require` (T-12, T-13) and `require-verify` (T-14, T-15) refuse a client without a certificate, and only
    `require-verify` checks it against --tls-root-ca-file (or the system's roots)."""
    if not options.tls_cert and not options.tls_key:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(options.tls_cert, options.tls_key)
        if options.tls_client_auth_policy in ("require", "require-verify"):
            context.verify_mode = ssl.CERT_REQUIRED
            if options.tls_client_auth_policy == "require":
                _accept_any_client_certificate(context)
            elif options.tls_root_ca_file:
                context.load_verify_locations(options.tls_root_ca_file)
            else:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        elif options.tls_root_ca_file:
            context.load_verify_locations(options.tls_root_ca_file)
    except (OSError, ssl.SSLError) as error:
        raise TLSConfigError(str(error)) from None
    context.minimum_version = ssl.TLSVersion(options.tls_min_version)
    _prefer_go_cipher_suites(context)
    return context


class TLSStream:
    def __init__(self, context: ssl.SSLContext):
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._lock = threading.Lock()

    def handshake(self, sock: socket.socket) -> None:
        """The server side of the handshake on the raw socket, within HANDSHAKE_TIMEOUT; raises OSError or
        ssl.SSLError (E_IDENTIFY_FAILED, then the connection closes)."""
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT
        while True:
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._send(sock, deadline)
                data = self._receive(sock, deadline)
                self._incoming.write(data)
            except ssl.SSLError:
                self._send(sock, deadline)  # the alert, as Go's handshake writes it before failing
                raise
        self._send(sock, deadline)

    def _send(self, sock: socket.socket, deadline: float) -> None:
        data = self._outgoing.read()
        if data:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.sendall(data)

    @staticmethod
    def _receive(sock: socket.socket, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("i/o timeout")
        sock.settimeout(remaining)
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("EOF")
        return data

    # -- one more output layer and input decoder ------------------------------------------------------------

    def encrypt(self, data: bytes) -> bytes:
        with self._lock:
            if data:
                self._ssl.write(data)
            return self._outgoing.read()

    def feed(self, data: bytes) -> None:
        with self._lock:
            self._incoming.write(data)

    def read(self, max_size: int) -> bytes:
        """Up to `max_size` decrypted bytes, b"" when a whole record has not arrived yet."""
        with self._lock:
            try:
                return self._ssl.read(max_size)
            except ssl.SSLWantReadError:
                return b""
            except ssl.SSLZeroReturnError:
                raise StreamError("EOF") from None
            except ssl.SSLError as error:
                raise StreamError(f"tls: {error.reason or error}") from None

    # -- what /stats and AUTH say of it ------------------------------------------------------------------

    def stats(self) -> dict:
        """T-04: nsqd's names for the version and the cipher suite; no ALPN, so no negotiated protocol."""
        name, _, _ = self._ssl.cipher()
        suite_id = _cipher_ids().get(name, 0)
        return {"tls": True, "tls_cipher_suite": _NSQD_CIPHER_NAMES.get(suite_id, f"Unknown {suite_id}"),
                "tls_version": _VERSION_NAMES.get(self._ssl.version(), self._ssl.version()),
                "tls_negotiated_protocol": "", "tls_negotiated_protocol_is_mutual": True}

    def peer_common_name(self) -> str:
        """The client certificate's subject CN, AUTH's `common_name` (empty without a certificate)."""
        certificate = self._ssl.getpeercert() or {}
        for rdn in certificate.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return value
        return ""


# Two settings of Go's crypto/tls that Python's ssl module does not expose are made through ctypes on the
# context's SSL_CTX (the first field after the object header of CPython's PySSLContext; SSL_CTX_get_verify_mode
# confirms that it is that pointer before anything is set):
# - tls.RequireAnyClientCert: a certificate must come, and any will do (Python verifies every certificate it asks
#   for and has no verify callback);
# - Go's preference among the TLS 1.3 suites, AES-128-GCM first (OpenSSL prefers AES-256-GCM), which /stats shows
#   as tls_cipher_suite (T-04); set_ciphers orders TLS 1.2's the same way.
_VERIFY_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
_ACCEPT_ANY = _VERIFY_CALLBACK(lambda preverify_ok, store: 1)
_SSL_VERIFY_PEER, _SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x01, 0x02
_GO_TLS13_SUITES = b"TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384"
_GO_TLS12_SUITES = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
                    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
                    "ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:ECDHE-RSA-AES256-SHA:"
                    "AES128-GCM-SHA256:AES256-GCM-SHA384:AES128-SHA:AES256-SHA")


def _ssl_ctx(context: ssl.SSLContext) -> tuple[ctypes.CDLL, int]:
    libssl = ctypes.CDLL(ssl._ssl.__file__)
    libssl.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
    libssl.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    libssl.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VERIFY_CALLBACK]
    libssl.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ssl_ctx = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    expected = {ssl.CERT_NONE: 0, ssl.CERT_REQUIRED: _SSL_VERIFY_PEER | _SSL_VERIFY_FAIL_IF_NO_PEER_CERT}
    if not ssl_ctx or libssl.SSL_CTX_get_verify_mode(ssl_ctx) != expected.get(context.verify_mode):
        raise TLSConfigError("this Python's ssl module does not keep its SSL_CTX where CPython 3.11 does")
    return libssl, ssl_ctx


def _prefer_go_cipher_suites(context: ssl.SSLContext) -> None:
    context.set_ciphers(_GO_TLS12_SUITES)
    libssl, ssl_ctx = _ssl_ctx(context)
    libssl.SSL_CTX_set_ciphersuites(ssl_ctx, _GO_TLS13_SUITES)


def _accept_any_client_certificate(context: ssl.SSLContext) -> None:
    libssl, ssl_ctx = _ssl_ctx(context)
    libssl.SSL_CTX_set_verify(ssl_ctx, _SSL_VERIFY_PEER | _SSL_VERIFY_FAIL_IF_NO_PEER_CERT, _ACCEPT_ANY)


_CIPHER_IDS: dict[str, int] = {}


def _cipher_ids() -> dict[str, int]:
    """OpenSSL's cipher names to their IANA numbers (the low 16 bits of OpenSSL's ids)."""
    if not _CIPHER_IDS:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_ciphers("ALL:@SECLEVEL=0")
        _CIPHER_IDS.update({cipher["name"]: cipher["id"] & 0xFFFF for cipher in context.get_ciphers()})
    return _CIPHER_IDS
