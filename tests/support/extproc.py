"""A gateway's half of the endpoint picker's protocol: Envoy's external processing (ext-proc) gRPC stream,
``envoy.service.ext_proc.v3.ExternalProcessor/Process``, driven from Python with the stubs of ``xds-protos``
(the gRPC project's build of envoyproxy/data-plane-api, pinned in pyproject.toml).

One HTTP request, as a gateway that implements the InferencePool does it (upstream's own hermetic test,
test/integration/util.go, sends the same two messages):

1. request headers (``:method``, ``:path``, ``x-request-id`` ...), then the body with ``end_of_stream``;
2. the picker answers with a header mutation that sets ``x-gateway-destination-endpoint`` to ``ip:port``, or to
   several, ``ip:port,ip:port,...``, best first (its max-score picker's ``maxNumOfEndpoints``; the operator
   renders 3), also in the dynamic metadata ``envoy.lb`` (pkg/epp/handlers/request.go,
   requestcontrol/director.go), then the body to send, streamed;
3. the gateway connects to the endpoints in the order named and sends the body to the first that accepts the
   connection, as Envoy does with the ``override_host`` load balancing policy (the list as given, "subsequent
   addresses are used for request retries") and a route retry policy; each endpoint is tried at most once, and
   which failures move on to the next is the policy's ``retry_on`` (Envoy's names):

   - ``connect-failure`` (the default, ``CONNECT_FAILURE``): **only when the connection fails** (refused,
     unreachable, connect timeout), before any byte of the request was sent. Once the request was sent it is
     never tried again elsewhere: a reset or a cut-off response is the client's error (``UpstreamError``).
   - ``connect-failure,reset`` (``CONNECT_FAILURE_RESET``, opt-in): also when the connection that took the
     request is reset or closed **before any byte of the response** came back (no status line, no header: the
     counting socket below says how many bytes were received), as Envoy's ``reset`` retries only while no
     response has started downstream. The request is resent to the next endpoint: safe for an inference request
     (no side effect beyond the compute; the answer never began). A response that started (status line or
     headers received, a stream of chunks cut off) is never retried: a failure. A read timeout with nothing
     received is not retried either (Envoy counts that under ``reset`` too; the bench's requests never wait that
     long, and a timeout on a live, slow server is not a dead one).

   ``Exchange.attempts`` / ``UpstreamError.attempts`` record every endpoint tried, when the request went out to
   it, how that ended, and, for each retry, why: ``connect-failure`` or ``reset-before-response``. Upstream's
   reference Envoy (an ``ORIGINAL_DST`` cluster, no retry policy; config/charts/standalone/values.yaml) would
   fail a refused connection instead; ``Gateway(walk=False)`` (``retry_on`` empty) does that. Then it passes the
   response's headers and body back through the stream
   with ``envoy.lb`` / ``x-gateway-destination-endpoint-served`` (the endpoint that served it) in each
   message's ``metadata_context``, as the picker's protocol requires of a data plane
   (docs/proposals/004-endpoint-picker-protocol), and ends the stream. A streamed response
   (``"stream": true``, server-sent events) is read to its end first, the time of its first chunk with a choice
   noted (``Exchange.ttft``, from the start of the exchange), then handed back whole.

The picker serves ext-proc over TLS with a self-signed certificate that names no host (``--secure-serving``,
its default; internal/tls/tls.go). Envoy's upstream TLS without a validation context does not verify it;
Python's gRPC cannot turn verification off, so ``TlsBridge`` plays that part: a loopback listener whose
connections it carries to the picker over TLS (ALPN h2, no verification), and the gRPC channel speaks
cleartext HTTP/2 to the bridge.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import queue
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2

DESTINATION = "x-gateway-destination-endpoint"  # pkg/epp/metadata/consts.go DestinationEndpointKey
DESTINATION_NAMESPACE = "envoy.lb"  # DestinationEndpointNamespace
SERVED = "x-gateway-destination-endpoint-served"  # DestinationEndpointServedKey: data plane -> picker
CONNECT_TIMEOUT = 5.0  # seconds; Envoy's default cluster connect_timeout
CONNECT_FAILURE = frozenset({"connect-failure"})  # Envoy retry_on: connect-failure (the default here)
CONNECT_FAILURE_RESET = frozenset({"connect-failure", "reset"})  # retry_on: connect-failure,reset
RETRY_ON = frozenset({"connect-failure", "reset"})  # what this driver models of Envoy's retry_on
# Why an attempt was retried on the next endpoint (Attempt.outcome):
RETRIED_CONNECT = "connect-failure"  # the connection failed; nothing was sent
RETRIED_RESET = "reset-before-response"  # sent, then reset or closed with no response byte received


class TlsBridge:
    """Loopback cleartext -> TLS to ``target``, unverified (as Envoy's upstream TLS without a validation
    context). ``alpn`` records what each handshake negotiated."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.alpn: list[str | None] = []
        # Why a connection to ``target`` failed: the client only sees its connection reset ("recvmsg: Connection
        # reset by peer"), since the bridge closes it with the client's HTTP/2 preface unread.
        self.failures: list[str] = []
        self._ctx = ssl.create_default_context()
        self._ctx.check_hostname = False
        self._ctx.verify_mode = ssl.CERT_NONE
        self._ctx.set_alpn_protocols(["h2"])
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tls-bridge", daemon=True)
        self.port = 0

    def start(self) -> TlsBridge:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the TLS bridge did not start")
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._carry, "127.0.0.1", 0))
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _carry(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target, ssl=self._ctx, server_hostname="")
        except OSError as err:
            self.failures.append(f"{type(err).__name__}: {err}"[:200])
            client_w.close()
            return
        ssl_object = up_w.get_extra_info("ssl_object")
        self.alpn.append(ssl_object.selected_alpn_protocol() if ssl_object else None)

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ssl.SSLError):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
                w.close()

        await asyncio.gather(pump(client_r, up_w), pump(up_r, client_w))

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@dataclass
class Attempt:
    """One endpoint tried for a request, in order. ``outcome``: ``served`` (a response came back, whatever its
    status), ``connect-failure`` or ``reset-before-response`` (and ``retried``: the next endpoint was tried), or
    ``failed`` (the last one tried, or a failure no policy retries: a response cut off after its first byte)."""

    endpoint: str
    sent: float | None  # monotonic: when the request went out (None: the connection failed, nothing sent)
    ended: float  # monotonic: when the attempt was over (served: the response read to its end)
    outcome: str
    received: int = 0  # bytes of the response received on this attempt's connection
    retried: bool = False
    error: str | None = None  # "ExceptionType: message" of a failed attempt


class _Attempted:
    """What a request's ``attempts`` say, for an answered request and a failed one alike."""

    attempts: list[Attempt]

    @property
    def tried(self) -> list[str]:
        return [a.endpoint for a in self.attempts]

    @property
    def retries(self) -> list[tuple[str, str]]:
        """(endpoint, why) of each attempt that was retried on the next endpoint."""
        return [(a.endpoint, a.outcome) for a in self.attempts if a.retried]


@dataclass
class Exchange(_Attempted):
    """One request through the picker, the endpoints it named and the one that served it."""

    endpoint: str  # the endpoint that served the request (reported back as x-gateway-destination-endpoint-served)
    destination: str  # the x-gateway-destination-endpoint header the picker set: "ip:port[,ip:port...]"
    metadata_endpoint: str  # the same, from the dynamic metadata envoy.lb
    status: int  # what the endpoint answered
    reply: Any  # the response body as the picker handed it back (JSON; a streamed one: its chunks' JSON)
    headers_set: dict[str, str] = field(default_factory=dict)
    ttft: float | None = None  # streamed: seconds from the first ext-proc message to the first chunk with a choice
    picked: list[str] = field(default_factory=list)  # ``destination`` split: the best first, then the fallbacks
    refused: list[str] = field(default_factory=list)  # the endpoints whose connection failed, in order (none sent)
    sent: float | None = None  # monotonic time the connection to ``endpoint`` was up and the request went out
    attempts: list[Attempt] = field(default_factory=list)  # every endpoint tried, in order; the last served


class UpstreamError(_Attempted, RuntimeError):
    """No endpoint the picker named accepted the connection, or the one that did broke off in a way the policy
    does not retry, or every one named failed (a gateway would answer 502/503). ``endpoint``: the last tried;
    ``sent``: when the request went out to it (None: never sent); ``attempts``: every endpoint tried."""

    def __init__(self, endpoint: str, error: BaseException, picked: list[str] | None = None,
                 refused: list[str] | None = None, sent: float | None = None,
                 attempts: list[Attempt] | None = None) -> None:
        super().__init__(f"{endpoint}: {type(error).__name__}: {error}")
        self.endpoint = endpoint
        self.picked = picked or [endpoint]
        self.refused = refused or []
        self.sent = sent
        self.attempts = attempts or []


class PickerError(RuntimeError):
    """The picker answered with an immediate response (no endpoint) instead of a header mutation."""


def _served(endpoint: str) -> base_pb2.Metadata:
    """The ``metadata_context`` a data plane sends with the response: envoy.lb / ...-served = the endpoint."""
    lb = struct_pb2.Struct()
    lb.update({SERVED: endpoint})
    return base_pb2.Metadata(filter_metadata={DESTINATION_NAMESPACE: lb})


def _headers(items: dict[str, str], end_of_stream: bool) -> pb.HttpHeaders:
    values = [base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in items.items()]
    return pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=values), end_of_stream=end_of_stream)


class _Stream:
    """One bidirectional Process stream: messages go in through a queue, answers come out in order."""

    def __init__(self, stub: pb_grpc.ExternalProcessorStub, timeout: float) -> None:
        self._out: queue.Queue[pb.ProcessingRequest | None] = queue.Queue()
        self._answers: Iterator[pb.ProcessingResponse] = stub.Process(iter(self._out.get, None), timeout=timeout)

    def send(self, message: pb.ProcessingRequest) -> None:
        self._out.put(message)

    def receive(self) -> pb.ProcessingResponse:
        answer = next(self._answers)
        if answer.HasField("immediate_response"):
            raise PickerError(f"immediate response {answer.immediate_response.status.code}: "
                              f"{answer.immediate_response.body!r} {answer.immediate_response.details}")
        return answer

    def close(self) -> None:
        self._out.put(None)
        with contextlib.suppress(StopIteration, grpc.RpcError):
            for _ in self._answers:
                pass


def _streamed_body(stream: _Stream, phase: str) -> bytes:
    """The picker's streamed body mutation for ``phase`` (request_body or response_body), up to its end."""
    body = b""
    while True:
        answer = stream.receive()
        assert answer.WhichOneof("response") == phase, answer
        streamed = getattr(answer, phase).response.body_mutation.streamed_response
        body += streamed.body
        if streamed.end_of_stream:
            return body


class Gateway:
    """Sends OpenAI requests the way a gateway does: ask the picker, forward to its choice, report back.

    ``retry_on``: which failures of an endpoint move the request on to the next one the picker named (module
    docstring): ``CONNECT_FAILURE`` (default) or ``CONNECT_FAILURE_RESET``; ``walk=False`` tries the first only."""

    def __init__(self, target: str, timeout: float = 120.0, walk: bool = True,
                 connect_timeout: float = CONNECT_TIMEOUT, retry_on: frozenset[str] = CONNECT_FAILURE) -> None:
        if not retry_on <= RETRY_ON:
            raise ValueError(f"retry_on {sorted(retry_on)}: only {sorted(RETRY_ON)} are modelled")
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.ExternalProcessorStub(self.channel)
        self.timeout = timeout
        self.walk = walk  # go down the picker's list as retry_on says (False: the first endpoint only)
        self.retry_on = retry_on if walk else frozenset()
        self.connect_timeout = connect_timeout

    def close(self) -> None:
        self.channel.close()

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Exchange:
        raw = json.dumps(body).encode()
        request_headers = {":method": "POST", ":path": path, ":authority": "inference-gateway",
                           ":scheme": "http", "content-type": "application/json",
                           "content-length": str(len(raw)), "x-request-id": str(uuid.uuid4()), **(headers or {})}
        started = time.monotonic()
        stream = _Stream(self.stub, self.timeout)
        try:
            stream.send(pb.ProcessingRequest(request_headers=_headers(request_headers, end_of_stream=False)))
            stream.send(pb.ProcessingRequest(request_body=pb.HttpBody(body=raw, end_of_stream=True)))
            answer = stream.receive()
            assert answer.WhichOneof("response") == "request_headers", answer
            mutation = answer.request_headers.response.header_mutation
            headers_set = {h.header.key: (h.header.raw_value or h.header.value.encode()).decode()
                           for h in mutation.set_headers}
            lb = answer.dynamic_metadata.fields[DESTINATION_NAMESPACE].struct_value
            metadata_endpoint = lb.fields[DESTINATION].string_value
            forwarded = _streamed_body(stream, "request_body")
            destination = headers_set[DESTINATION]
            picked = [e.strip() for e in destination.split(",") if e.strip()]
            endpoint, (status, reply_headers, reply, first), attempts = self.forward(picked, path, forwarded)
            served = _served(endpoint)
            stream.send(pb.ProcessingRequest(response_headers=_headers(
                {":status": str(status), **reply_headers}, end_of_stream=False), metadata_context=served))
            stream.send(pb.ProcessingRequest(response_body=pb.HttpBody(body=reply, end_of_stream=True),
                                             metadata_context=served))
            assert stream.receive().WhichOneof("response") == "response_headers"
            handed_back = _streamed_body(stream, "response_body")
        finally:
            stream.close()
        streamed = reply_headers.get("content-type", "").startswith("text/event-stream")
        reply_body = events(handed_back) if streamed else json.loads(handed_back)
        refused = [a.endpoint for a in attempts if a.outcome == RETRIED_CONNECT]
        return Exchange(endpoint, destination, metadata_endpoint, status, reply_body, headers_set,
                        None if first is None else first - started, picked, refused, attempts[-1].sent, attempts)

    def forward(self, picked: list[str], path: str, body: bytes
                ) -> tuple[str, tuple[int, dict[str, str], bytes, float | None], list[Attempt]]:
        """POST ``body`` to the first of ``picked`` that answers, going down the list as ``retry_on`` allows,
        each endpoint once: (the endpoint that answered, ``send``'s result, every attempt). ``UpstreamError``
        when none did."""
        attempts: list[Attempt] = []
        candidates = picked if self.walk else picked[:1]
        for i, endpoint in enumerate(candidates):
            more = i + 1 < len(candidates)
            try:
                conn = connect(endpoint, self.timeout, self.connect_timeout)
            except OSError as err:  # refused, unreachable, connect timeout: Envoy's connect-failure
                retry = more and "connect-failure" in self.retry_on
                attempts.append(Attempt(endpoint, None, time.monotonic(), RETRIED_CONNECT if retry else "failed",
                                        0, retry, _describe(err)))
                if retry:
                    continue
                raise UpstreamError(endpoint, err, picked, _refused(attempts, err), None, attempts) from err
            sock = conn.sock
            assert isinstance(sock, CountingSocket)
            sent = time.monotonic()
            try:
                result = send(conn, path, body)
            except (OSError, http.client.HTTPException) as err:  # sent, then reset or cut short
                received = sock.received
                # Envoy's reset: the upstream reset or closed the connection, nothing of the response received.
                # Never once a response byte came back, never on a timeout (a slow server is not a dead one).
                retry = (more and "reset" in self.retry_on and received == 0
                         and not isinstance(err, TimeoutError) and isinstance(err, (ConnectionError,
                                                                                    http.client.HTTPException)))
                attempts.append(Attempt(endpoint, sent, time.monotonic(), RETRIED_RESET if retry else "failed",
                                        received, retry, _describe(err)))
                if retry:
                    continue
                raise UpstreamError(endpoint, err, picked, _refused(attempts), sent, attempts) from err
            finally:
                conn.close()
            attempts.append(Attempt(endpoint, sent, time.monotonic(), "served", sock.received))
            return endpoint, result, attempts
        raise AssertionError(f"no endpoint to try in {picked}")


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:200]


def _refused(attempts: list[Attempt], last_connect_error: OSError | None = None) -> list[str]:
    """The endpoints whose connection failed (nothing sent), in order, the failing last one included."""
    refused = [a.endpoint for a in attempts if a.outcome == RETRIED_CONNECT]
    if last_connect_error is not None:
        refused.append(attempts[-1].endpoint)
    return refused


class CountingSocket(socket.socket):
    """A connected socket that counts the bytes received on it (``http.client`` reads the response through
    ``recv_into``): 0 after a failure means no byte of the response came back."""

    received = 0

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        n = super().recv_into(buffer, nbytes, flags)
        self.received += n
        return n

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        self.received += len(data)
        return data


def events(body: bytes) -> list[Any]:
    """The JSON of each ``data:`` event of a server-sent-events body (``[DONE]`` left out)."""
    lines = (line.strip() for line in body.decode("utf-8", "replace").splitlines())
    return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line != "data: [DONE]"]


def first_choice(line: bytes) -> bool:
    """Whether a server-sent-events line is a chunk that carries a choice: vLLM sends the first (the role) once
    the first token exists (bench/ttft_probe.py says why this, not the first content)."""
    text = line.decode("utf-8", "replace").strip()
    return text.startswith("data:") and text != "data: [DONE]" and bool(json.loads(text[5:]).get("choices"))


def connect(endpoint: str, timeout: float, connect_timeout: float = CONNECT_TIMEOUT) -> http.client.HTTPConnection:
    """An open connection to ``endpoint`` (``ip:port``) on a ``CountingSocket``; OSError when it cannot be made
    (nothing sent)."""
    host, port = endpoint.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=connect_timeout)
    try:
        conn.connect()
    except BaseException:
        conn.close()
        raise
    plain = conn.sock
    assert plain is not None
    counting = CountingSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
    counting.settimeout(timeout)
    conn.sock = counting
    return conn


def send(conn: http.client.HTTPConnection, path: str, body: bytes) -> tuple[int, dict[str, str], bytes, float | None]:
    """POST ``body`` on an open connection; the status, headers, body and the time (monotonic) of a streamed
    response's first chunk with a choice."""
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    headers = {k.lower(): v for k, v in resp.getheaders()}
    if not headers.get("content-type", "").startswith("text/event-stream"):
        return int(resp.status), headers, resp.read(), None
    lines, first = [], None
    for line in resp:
        lines.append(line)
        if first is None and first_choice(line):
            first = time.monotonic()
    return int(resp.status), headers, b"".join(lines), first


def forward(endpoint: str, path: str, body: bytes, timeout: float
            ) -> tuple[int, dict[str, str], bytes, float | None]:
    """One request straight to one endpoint (what a plain Service does once kube-proxy has chosen it)."""
    conn = connect(endpoint, timeout)
    try:
        return send(conn, path, body)
    finally:
        conn.close()
