"""The webhook's HTTPS server, in the operator process: every replica serves it (the webhook's Service selects
them all), leader or not, on its own thread and event loop so a busy reconcile never delays an apply.

The certificate comes from files (a mounted Secret written by cert-manager or by the chart) and is reloaded
when they change: Kubernetes updates a mounted Secret in place, so a rotated certificate is served without a
restart, to every new connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from prometheus_client import Gauge

from qwen_fleet.admission.review import review
from qwen_fleet.config import OperatorConfig

log = logging.getLogger(__name__)
PATH = "/validate"
RELOAD_SECONDS = 30.0
# The chart's alert QwenFleetWebhookCertificateExpiring reads it: with failurePolicy Ignore an expired
# certificate silently turns validation off, so the expiry must be visible before it happens.
CERT_EXPIRY = Gauge("qwen_fleet_webhook_cert_expiry_timestamp_seconds",
                    "notAfter of the admission webhook's serving certificate (Unix time)")


def not_after(cert_file: Path) -> float:
    """The certificate's notAfter, in Unix seconds (the stdlib's decoder; no cryptography package needed)."""
    decoded = ssl._ssl._test_decode_cert(str(cert_file))  # type: ignore[attr-defined]
    return float(ssl.cert_time_to_seconds(decoded["notAfter"]))


@dataclass(frozen=True)
class WebhookSettings:
    port: int
    cert_file: Path
    key_file: Path
    host: str = "0.0.0.0"


class CertificateFiles:
    """An SSL context that reloads its certificate chain when the files on disk change."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple[float, float] | None = None
        self.reload()

    def _mtimes(self) -> tuple[float, float]:
        return self.cert_file.stat().st_mtime, self.key_file.stat().st_mtime

    def reload(self) -> bool:
        """Load the chain again if the files changed since the last load; True when it did."""
        stamp = self._mtimes()
        if stamp == self._stamp:
            return False
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._stamp = stamp
        CERT_EXPIRY.set(not_after(self.cert_file))
        return True


def make_app(config: OperatorConfig) -> web.Application:
    async def validate(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return web.Response(status=400, text="an AdmissionReview in JSON is expected")
        return web.json_response(review(body, config))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=3 * 1024 * 1024)  # an object is at most ~1.5 MiB, old and new
    app.router.add_post(PATH, validate)
    app.router.add_get("/healthz", healthz)
    return app


class WebhookServer:
    """Serve the webhook on a thread of its own until ``stop()``."""

    def __init__(self, settings: WebhookSettings, config: OperatorConfig) -> None:
        self.settings, self.config = settings, config
        self.certificate = CertificateFiles(settings.cert_file, settings.key_file)
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="admission-webhook", daemon=True)

    def start(self) -> WebhookServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=30)
        log.info("admission webhook serving on %s:%d%s", self.settings.host, self.settings.port, PATH)
        return self

    async def _serve(self) -> None:
        self._runner = web.AppRunner(make_app(self.config), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port, ssl_context=self.certificate.context)
        await site.start()
        self._loop.create_task(self._watch_certificate())

    async def _watch_certificate(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_SECONDS)
            try:
                if self.certificate.reload():
                    log.info("admission webhook: certificate reloaded from %s", self.certificate.cert_file)
            except (OSError, ssl.SSLError) as err:  # mid-rotation (one file written, not the other): next time
                log.warning("admission webhook: certificate not reloaded: %s", err)

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


def start_from_config(config: OperatorConfig) -> WebhookServer:
    cert_dir = Path(config.webhook_cert_dir)
    settings = WebhookSettings(config.webhook_port, cert_dir / "tls.crt", cert_dir / "tls.key")
    return WebhookServer(settings, config).start()
