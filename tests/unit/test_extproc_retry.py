"""The ext-proc driver's retry decisions (tests/support/extproc.py ``Gateway.forward``), against loopback
servers that misbehave on purpose: one that refuses connections, one that reads the request and resets the
connection (or closes it) without a response byte, one that sends a status line and headers and then resets, and
one that answers. No picker: ``forward`` is the part of ``Gateway.post`` that walks the picker's list."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.extproc import (
    CONNECT_FAILURE,
    CONNECT_FAILURE_RESET,
    RETRIED_CONNECT,
    RETRIED_RESET,
    Gateway,
    UpstreamError,
)

BODY = json.dumps({"model": "m", "messages": []}).encode()
REPLY = b'{"ok": true}'


class Loopback:
    """A loopback HTTP/1.1 server that handles each connection by ``mode``: ``answer`` (200 and REPLY),
    ``reset`` (reads the whole request, then RST), ``close`` (reads it, then FIN, nothing sent), ``headers-reset``
    (reads it, sends a status line and headers, waits, then RST). ``requests``: requests read in full."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self._handle(conn)

    def _handle(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += conn.recv(65536)
        self.requests += 1
        if self.mode == "answer":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(REPLY)).encode() + b"\r\nConnection: close\r\n\r\n" + REPLY)
            return
        if self.mode == "close":
            return  # FIN, nothing sent
        if self.mode == "headers-reset":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
            time.sleep(0.3)  # the client has read the headers and waits for the body
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends RST

    def close(self) -> None:
        self.sock.close()


def refusing_endpoint() -> str:
    """A loopback port nothing listens on: the connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def servers() -> Iterator[dict[str, Loopback]]:
    made = {mode: Loopback(mode) for mode in ("answer", "reset", "close", "headers-reset")}
    yield made
    for server in made.values():
        server.close()


@contextlib.contextmanager
def gateway(retry_on: frozenset[str] = CONNECT_FAILURE, walk: bool = True) -> Iterator[Gateway]:
    g = Gateway("127.0.0.1:1", timeout=10, walk=walk, retry_on=retry_on)  # the channel is never used
    try:
        yield g
    finally:
        g.close()


def test_connect_failure_only_goes_on_past_a_refused_connection(servers: dict[str, Loopback]) -> None:
    refused, ok = refusing_endpoint(), servers["answer"]
    with gateway() as g:
        endpoint, (status, _, reply, _), attempts = g.forward([refused, ok.endpoint], "/v1/x", BODY)
    assert (endpoint, status, reply, ok.requests) == (ok.endpoint, 200, REPLY, 1)
    assert [(a.endpoint, a.outcome, a.retried, a.sent is None) for a in attempts] == [
        (refused, RETRIED_CONNECT, True, True), (ok.endpoint, "served", False, False)]


def test_connect_failure_only_never_resends_a_request_that_went_out(servers: dict[str, Loopback]) -> None:
    reset, ok = servers["reset"], servers["answer"]
    with gateway() as g, pytest.raises(UpstreamError) as caught:
        g.forward([reset.endpoint, ok.endpoint], "/v1/x", BODY)
    err = caught.value
    assert (reset.requests, ok.requests) == (1, 0)
    assert (err.endpoint, err.tried, err.retries, err.refused, err.sent is not None) == (
        reset.endpoint, [reset.endpoint], [], [], True)
    assert [(a.outcome, a.received) for a in err.attempts] == [("failed", 0)]


@pytest.mark.parametrize("mode", ["reset", "close"])
def test_reset_retries_a_request_whose_answer_never_began(servers: dict[str, Loopback], mode: str) -> None:
    broken, ok = servers[mode], servers["answer"]
    with gateway(CONNECT_FAILURE_RESET) as g:
        endpoint, (status, _, reply, _), attempts = g.forward([broken.endpoint, ok.endpoint], "/v1/x", BODY)
    assert (endpoint, status, reply) == (ok.endpoint, 200, REPLY)
    assert (broken.requests, ok.requests) == (1, 1)  # the request reached the broken one, and was resent once
    assert [(a.endpoint, a.outcome, a.retried) for a in attempts] == [
        (broken.endpoint, RETRIED_RESET, True), (ok.endpoint, "served", False)]
    assert attempts[0].received == 0 and attempts[1].received > len(REPLY)  # the status line, headers, body
    assert all(a.sent is not None for a in attempts)


def test_reset_never_retries_once_a_response_byte_came_back(servers: dict[str, Loopback]) -> None:
    started, ok = servers["headers-reset"], servers["answer"]
    with gateway(CONNECT_FAILURE_RESET) as g, pytest.raises(UpstreamError) as caught:
        g.forward([started.endpoint, ok.endpoint], "/v1/x", BODY)
    err = caught.value
    assert (started.requests, ok.requests) == (1, 0)
    assert (err.endpoint, err.tried, err.retries) == (started.endpoint, [started.endpoint], [])
    [attempt] = err.attempts
    assert attempt.outcome == "failed" and attempt.received > 0 and not attempt.retried


def test_reset_policy_records_each_retry_and_why(servers: dict[str, Loopback]) -> None:
    refused, reset, ok = refusing_endpoint(), servers["reset"], servers["answer"]
    with gateway(CONNECT_FAILURE_RESET) as g:
        endpoint, _, attempts = g.forward([refused, reset.endpoint, ok.endpoint], "/v1/x", BODY)
    assert endpoint == ok.endpoint
    assert [(a.endpoint, a.outcome) for a in attempts if a.retried] == [
        (refused, RETRIED_CONNECT), (reset.endpoint, RETRIED_RESET)]
    assert [a.endpoint for a in attempts] == [refused, reset.endpoint, ok.endpoint]


def test_every_endpoint_is_tried_once_and_the_last_failure_is_the_request_s(servers: dict[str, Loopback]) -> None:
    reset, close = servers["reset"], servers["close"]
    with gateway(CONNECT_FAILURE_RESET) as g, pytest.raises(UpstreamError) as caught:
        g.forward([reset.endpoint, close.endpoint], "/v1/x", BODY)
    err = caught.value
    assert (reset.requests, close.requests) == (1, 1)
    assert [(a.endpoint, a.outcome, a.retried) for a in err.attempts] == [
        (reset.endpoint, RETRIED_RESET, True), (close.endpoint, "failed", False)]
    assert err.endpoint == close.endpoint and err.retries == [(reset.endpoint, RETRIED_RESET)]


def test_every_endpoint_refused_fails_with_all_of_them_refused() -> None:
    first, second = refusing_endpoint(), refusing_endpoint()
    with gateway(CONNECT_FAILURE_RESET) as g, pytest.raises(UpstreamError) as caught:
        g.forward([first, second], "/v1/x", BODY)
    err = caught.value
    assert (err.refused, err.sent, [a.outcome for a in err.attempts]) == ([first, second], None,
                                                                          [RETRIED_CONNECT, "failed"])


def test_without_walk_only_the_first_endpoint_is_tried(servers: dict[str, Loopback]) -> None:
    refused, ok = refusing_endpoint(), servers["answer"]
    with gateway(CONNECT_FAILURE_RESET, walk=False) as g, pytest.raises(UpstreamError) as caught:
        g.forward([refused, ok.endpoint], "/v1/x", BODY)
    assert caught.value.tried == [refused] and caught.value.refused == [refused] and ok.requests == 0


def test_only_modelled_retry_conditions_are_accepted() -> None:
    with pytest.raises(ValueError, match="5xx"):
        Gateway("127.0.0.1:1", retry_on=frozenset({"connect-failure", "5xx"}))
