"""URLs as the batch may say them: without credentials. Standard library only (the runner imports it).

An input URL is often presigned (S3's ``X-Amz-Signature``, GCS's ``X-Goog-Signature``, Azure's SAS ``sig``: a
credential in the query string) or carries ``user:password@``. Status, Events and logs are read by more people
than the spec, so wherever the batch reports a URL it reports ``scheme://host[:port]/path`` only, with ``?...``
in place of a query and ``***@`` in place of userinfo, saying that something was left out.
"""

from __future__ import annotations

import re
import urllib.parse

_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


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
        return redact_url(core) + url[len(core):]
    return _URL.sub(one, text)
