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
   connection: it moves on to the next **only when the connection fails** (refused, unreachable, connect
   timeout), before any byte of the request was sent, as Envoy does with the ``override_host`` load balancing
   policy (the list as given, "subsequent addresses are used for request retries") and a route retry policy of
   ``retry_on: connect-failure`` (what Istio's and Envoy Gateway's inference support configure). Once the
   request was sent it is never tried again elsewhere: a reset or a cut-off response is the client's error
   (``UpstreamError``), since the generation may have run. Upstream's reference Envoy (an ``ORIGINAL_DST``
   cluster, no retry policy; config/charts/standalone/values.yaml) would fail a refused connection instead;
   ``Gateway(walk=False)`` does that. Then it passes the response's headers and body back through the stream
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


class TlsBridge:
    """Loopback cleartext -> TLS to ``target``, unverified (as Envoy's upstream TLS without a validation
    context). ``alpn`` records what each handshake negotiated."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.alpn: list[str | None] = []
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
        except OSError:
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
class Exchange:
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


class UpstreamError(RuntimeError):
    """No endpoint the picker named accepted the connection, or the one that did broke off after the request
    was sent (a gateway would answer 502/503). ``sent``: when the request went out (None: never sent)."""

    def __init__(self, endpoint: str, error: BaseException, picked: list[str] | None = None,
                 refused: list[str] | None = None, sent: float | None = None) -> None:
        super().__init__(f"{endpoint}: {type(error).__name__}: {error}")
        self.endpoint = endpoint
        self.picked = picked or [endpoint]
        self.refused = refused or []
        self.sent = sent


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
    """Sends OpenAI requests the way a gateway does: ask the picker, forward to its choice, report back."""

    def __init__(self, target: str, timeout: float = 120.0, walk: bool = True,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.ExternalProcessorStub(self.channel)
        self.timeout = timeout
        self.walk = walk  # go down the picker's list on a connect failure (False: the first endpoint only)
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
            endpoint, conn, refused = self._connect(picked)
            sent = time.monotonic()
            try:
                status, reply_headers, reply, first = send(conn, path, forwarded)
            except (OSError, http.client.HTTPException) as err:  # sent, then reset or cut short: a gateway's 5xx
                raise UpstreamError(endpoint, err, picked, refused, sent) from err
            finally:
                conn.close()
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
        return Exchange(endpoint, destination, metadata_endpoint, status, reply_body, headers_set,
                        None if first is None else first - started, picked, refused, sent)

    def _connect(self, picked: list[str]) -> tuple[str, http.client.HTTPConnection, list[str]]:
        """A connection to the first of ``picked`` that accepts one (only the first without ``walk``), with the
        endpoints refused before it. Nothing has been sent to any of them."""
        refused: list[str] = []
        error: OSError | None = None
        for endpoint in picked if self.walk else picked[:1]:
            try:
                return endpoint, connect(endpoint, self.timeout, self.connect_timeout), refused
            except OSError as err:  # refused, unreachable, connect timeout: Envoy's connect-failure
                refused.append(endpoint)
                error = err
        assert error is not None, picked
        raise UpstreamError(refused[-1], error, picked, refused) from error


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
    """An open connection to ``endpoint`` (``ip:port``); OSError when it cannot be made (nothing sent)."""
    host, port = endpoint.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=connect_timeout)
    try:
        conn.connect()
    except BaseException:
        conn.close()
        raise
    assert conn.sock is not None
    conn.sock.settimeout(timeout)
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
