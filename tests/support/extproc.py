"""A gateway's half of the endpoint picker's protocol: Envoy's external processing (ext-proc) gRPC stream,
``envoy.service.ext_proc.v3.ExternalProcessor/Process``, driven from Python with the stubs of ``xds-protos``
(the gRPC project's build of envoyproxy/data-plane-api, pinned in pyproject.toml).

One HTTP request, as a gateway that implements the InferencePool does it (upstream's own hermetic test,
test/integration/util.go, sends the same two messages):

1. request headers (``:method``, ``:path``, ``x-request-id`` ...), then the body with ``end_of_stream``;
2. the picker answers with a header mutation that sets ``x-gateway-destination-endpoint`` to ``ip:port`` (also
   in the dynamic metadata ``envoy.lb``; pkg/epp/handlers/request.go), then the body to send, streamed;
3. the gateway sends that body to that endpoint, and passes the response's headers and body back through the
   stream (the picker's plugins see the response; pkg/epp/handlers/server.go), then ends the stream. A streamed
   response (``"stream": true``, server-sent events) is read to its end first, the time of its first chunk with
   a choice noted (``Exchange.ttft``, from the start of the exchange), then handed back whole.

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
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

DESTINATION = "x-gateway-destination-endpoint"  # pkg/epp/metadata/consts.go DestinationEndpointKey
DESTINATION_NAMESPACE = "envoy.lb"  # DestinationEndpointNamespace


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
    """One request through the picker and the endpoint it chose."""

    endpoint: str  # the x-gateway-destination-endpoint header the picker set
    metadata_endpoint: str  # the same, from the dynamic metadata envoy.lb
    status: int  # what the endpoint answered
    reply: Any  # the response body as the picker handed it back (JSON; a streamed one: its chunks' JSON)
    headers_set: dict[str, str] = field(default_factory=dict)
    ttft: float | None = None  # streamed: seconds from the first ext-proc message to the first chunk with a choice


class UpstreamError(RuntimeError):
    """The endpoint the picker chose could not be reached or broke off (a gateway would answer 502/503)."""

    def __init__(self, endpoint: str, error: BaseException) -> None:
        super().__init__(f"{endpoint}: {type(error).__name__}: {error}")
        self.endpoint = endpoint


class PickerError(RuntimeError):
    """The picker answered with an immediate response (no endpoint) instead of a header mutation."""


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

    def __init__(self, target: str, timeout: float = 120.0) -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.ExternalProcessorStub(self.channel)
        self.timeout = timeout

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
            endpoint = headers_set[DESTINATION]
            try:
                status, reply_headers, reply, first = forward(endpoint, path, forwarded, self.timeout)
            except (OSError, http.client.HTTPException) as err:  # refused, reset, cut short: a gateway's 5xx
                raise UpstreamError(endpoint, err) from err
            stream.send(pb.ProcessingRequest(response_headers=_headers(
                {":status": str(status), **reply_headers}, end_of_stream=False)))
            stream.send(pb.ProcessingRequest(response_body=pb.HttpBody(body=reply, end_of_stream=True)))
            assert stream.receive().WhichOneof("response") == "response_headers"
            handed_back = _streamed_body(stream, "response_body")
        finally:
            stream.close()
        streamed = reply_headers.get("content-type", "").startswith("text/event-stream")
        reply_body = events(handed_back) if streamed else json.loads(handed_back)
        return Exchange(endpoint, metadata_endpoint, status, reply_body, headers_set,
                        None if first is None else first - started)


def events(body: bytes) -> list[Any]:
    """The JSON of each ``data:`` event of a server-sent-events body (``[DONE]`` left out)."""
    lines = (line.strip() for line in body.decode("utf-8", "replace").splitlines())
    return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line != "data: [DONE]"]


def first_choice(line: bytes) -> bool:
    """Whether a server-sent-events line is a chunk that carries a choice: vLLM sends the first (the role) once
    the first token exists (bench/ttft_probe.py says why this, not the first content)."""
    text = line.decode("utf-8", "replace").strip()
    return text.startswith("data:") and text != "data: [DONE]" and bool(json.loads(text[5:]).get("choices"))


def forward(endpoint: str, path: str, body: bytes, timeout: float
             ) -> tuple[int, dict[str, str], bytes, float | None]:
    """The upstream request, to the address the picker chose (one endpoint: the default profile picks one);
    with the time (monotonic) of a streamed response's first chunk with a choice."""
    assert "," not in endpoint, f"the picker named several endpoints: {endpoint}"
    request = urllib.request.Request(f"http://{endpoint}{path}", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            headers = {k.lower(): v for k, v in resp.headers.items()}
            if not headers.get("content-type", "").startswith("text/event-stream"):
                return int(resp.status), headers, resp.read(), None
            lines, first = [], None
            for line in resp:
                lines.append(line)
                if first is None and first_choice(line):
                    first = time.monotonic()
            return int(resp.status), headers, b"".join(lines), first
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read(), None
