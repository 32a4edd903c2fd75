"""A self-signed certificate for the tests that speak TLS to a server of their own on 127.0.0.1.

`self_signed(folder, name)` makes one with the `openssl` command (present wherever the tests
run: CI installs nothing for it), valid for a day, for a DNS name or an IP address, and returns
the server's context and a client context that trusts it (and the certificate's path, for a
client that reads its trust from `SSL_CERT_FILE`). Made per run: no key is kept in the
repository.
"""

from __future__ import annotations

import ipaddress
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SelfSigned:
    cert: Path
    server: ssl.SSLContext
    trust: ssl.SSLContext


def self_signed(folder: Path, name: str) -> SelfSigned:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    try:
        ipaddress.ip_address(name)
        alt = f"IP:{name}"
    except ValueError:
        alt = f"DNS:{name}"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
         "-addext", f"subjectAltName={alt}"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return SelfSigned(cert, server, ssl.create_default_context(cafile=str(cert)))
