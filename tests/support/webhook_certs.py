"""A CA and a serving certificate for the admission webhook on loopback, made with the openssl command line
(the apiserver calls the webhook at https://127.0.0.1:<port>, so the certificate names that IP)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ServingCert:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def make_serving_cert(directory: Path, cn: str = "qwen-fleet-webhook", days: int = 2) -> ServingCert:
    directory.mkdir(parents=True, exist_ok=True)
    out = ServingCert(ca=directory / "ca.crt", cert=directory / "tls.crt", key=directory / "tls.key")
    ca_key, csr, ext = directory / "ca.key", directory / "tls.csr", directory / "san.ext"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-days", days,
             "-subj", f"/CN={cn}-ca", "-out", out.ca)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", out.key, "-subj", f"/CN={cn}", "-out", csr)
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", csr, "-CA", out.ca, "-CAkey", ca_key, "-CAcreateserial", "-days", days,
             "-extfile", ext, "-out", out.cert)
    return out
