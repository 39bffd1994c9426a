"""URLs and keys as the batch may say them: without credentials. Standard library only (the runner imports it).

An input URL is often presigned (S3's ``X-Amz-Signature``, GCS's ``X-Goog-Signature``, Azure's SAS ``sig``: a
credential in the query string) or carries ``user:password@``. Status, Events and logs are read by more people
than the spec, so wherever the batch reports a URL it reports ``scheme://host[:port]/path`` only, with ``?...``
in place of a query and ``***@`` in place of userinfo, saying that something was left out.

The fleet's API key (batchrun/runner.py ``API_KEY_ENV``) is in the runner's memory only: ``redact_keys`` puts
``***`` where it, or any ``Bearer`` credential, would appear in text the runner writes (records' error messages,
its last words), and ``RedactingFilter`` does the same, URLs too, for every log record.
"""

from __future__ import annotations

import logging
import re
import urllib.parse

REDACTED = "***"
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[^\s'\",;]+")


def redact_url(url: str) -> str:
    """``url`` without its query string, fragment and userinfo."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not even a URL (an unbalanced '['): say nothing of it but its scheme
        return url.split(":", 1)[0] + "://***"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "?..." if parts.query else ""
    fragment = "#..." if parts.fragment else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + query + fragment


def redact_urls(text: str) -> str:
    """Every URL in free text (a pod's last words, an error message) redacted as ``redact_url`` does; the
    punctuation that ends a sentence after it stays."""
    def one(match: re.Match[str]) -> str:
        url = match.group(0)
        core = url.rstrip(".,:;)!")
        if core.endswith(("?", "#")) and url[len(core):].startswith("..."):  # redacted already: keep its "?..."
            core = core[:-1]
        return redact_url(core) + url[len(core):]
    return _URL.sub(one, text)


def redact_keys(text: str, *secrets: str) -> str:
    """``text`` with each of ``secrets`` (the empty one ignored) and any ``Bearer`` credential replaced by
    ``***``. URLs are ``redact_urls``' work, done where a URL is said (not twice: its ``?...`` is not a URL's)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


class RedactingFilter(logging.Filter):
    """On a handler: every record it emits goes through ``redact_keys`` and ``redact_urls`` (its arguments merged
    into the message first)."""

    def __init__(self, *secrets: str) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:  # a traceback is text the handler would add unredacted
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_urls(redact_keys(record.exc_text, *self.secrets))
        record.msg, record.args = redact_urls(redact_keys(message, *self.secrets)), None
        return True
