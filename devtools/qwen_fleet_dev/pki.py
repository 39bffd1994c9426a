"""Keys and certificates for the local control plane, made with the openssl command line.

Clients authenticate with static bearer tokens and the apiserver makes its own self-signed serving
certificate, so the only real PKI is: one RSA key that signs ServiceAccount tokens, and a front-proxy CA plus
client certificate so the aggregation layer can reach extension API servers (a metrics adapter).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    sa_key: Path
    front_proxy_ca: Path
    front_proxy_client_cert: Path
    front_proxy_client_key: Path


FRONT_PROXY_CLIENT = "front-proxy-client"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        sa_key=directory / "sa.key",
        front_proxy_ca=directory / "front-proxy-ca.crt",
        front_proxy_client_cert=directory / "front-proxy-client.crt",
        front_proxy_client_key=directory / "front-proxy-client.key",
    )
    if pki.front_proxy_client_cert.exists():
        return pki
    _openssl("genrsa", "-out", str(pki.sa_key), "2048")
    _ca_and_client(directory / "front-proxy-ca.key", pki.front_proxy_ca, "/CN=front-proxy-ca",
                   pki.front_proxy_client_key, pki.front_proxy_client_cert, f"/CN={FRONT_PROXY_CLIENT}")
    return pki


def _ca_and_client(ca_key: Path, ca: Path, ca_subject: str, key: Path, cert: Path, subject: str) -> None:
    """A self-signed CA (10 years) and a client certificate it signs for ``subject``."""
    csr = cert.with_suffix(".csr")
    _openssl("genrsa", "-out", str(ca_key), "2048")
    _openssl("req", "-x509", "-new", "-key", str(ca_key), "-days", "3650", "-subj", ca_subject, "-out", str(ca))
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "3650", "-out", str(cert))


@dataclass(frozen=True)
class KubeletClientPki:
    """The kubelet trusts ``ca``; the apiserver presents ``cert`` (a system:masters user) for logs and exec."""

    ca: Path
    cert: Path
    key: Path


KUBELET_CLIENT = "kube-apiserver-kubelet-client"


def make_kubelet_client_pki(directory: Path) -> KubeletClientPki:
    directory.mkdir(parents=True, exist_ok=True)
    pki = KubeletClientPki(ca=directory / "kubelet-client-ca.crt", cert=directory / "kubelet-client.crt",
                           key=directory / "kubelet-client.key")
    if pki.cert.exists():
        return pki
    _ca_and_client(directory / "kubelet-client-ca.key", pki.ca, "/CN=kubelet-client-ca", pki.key, pki.cert,
                   f"/O=system:masters/CN={KUBELET_CLIENT}")
    return pki


@dataclass(frozen=True)
class LoopbackServingPki:
    """A CA and a serving certificate for a webhook the apiserver calls at https://127.0.0.1:<port>."""

    ca: Path
    cert: Path
    key: Path


def make_loopback_serving_pki(directory: Path, name: str, dns_names: tuple[str, ...] = (),
                              client_auth: bool = False) -> LoopbackServingPki:
    """``tls.crt``/``tls.key`` (the file names controller-runtime's webhook server reads from its certDir).

    ``dns_names`` are added to the loopback names (the aggregation layer checks an APIService's certificate
    against ``<service>.<namespace>.svc``); with ``client_auth`` the certificate also authenticates its holder
    as a client (KEDA's operator and metrics apiserver use one certificate both ways on their mutual-TLS gRPC).
    """
    directory.mkdir(parents=True, exist_ok=True)
    pki = LoopbackServingPki(ca=directory / "ca.crt", cert=directory / "tls.crt", key=directory / "tls.key")
    if pki.cert.exists():
        return pki
    ca_key, csr, ext = directory / "ca.key", directory / "tls.csr", directory / "san.ext"
    _openssl("genrsa", "-out", str(ca_key), "2048")
    _openssl("req", "-x509", "-new", "-key", str(ca_key), "-days", "3650", "-subj", f"/CN={name}-ca",
             "-out", str(pki.ca))
    _openssl("genrsa", "-out", str(pki.key), "2048")
    _openssl("req", "-new", "-key", str(pki.key), "-subj", f"/CN={name}", "-out", str(csr))
    sans = ",".join(["IP:127.0.0.1", "DNS:localhost", *(f"DNS:{n}" for n in dns_names)])
    usage = "serverAuth,clientAuth" if client_auth else "serverAuth"
    ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage={usage}\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki.ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "3650", "-extfile", str(ext), "-out", str(pki.cert))
    return pki
