"""An HTTP proxy on loopback between S3 clients and an S3-API server, which counts the
requests by kind and injects faults: latency per request, error answers (503 SlowDown,
500), a response cut in the middle of its body, and the store stopped (connections
refused) and started again on the same port, also by a request it is told to stop at.

It also drops `Expect: 100-continue` from requests: the AWS SDK v2's asynchronous client
(hadoop-aws 3.5's uploads) takes moto's interim `100 Continue` for the final answer and
fails the upload with "Status Code: 100"; without the header the body goes at once.
"""

from __future__ import annotations

import collections
import http.client
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection", "te", "upgrade"}


def request_area(target: str) -> str:
    """Which part of a checkpoint a request is about: "statestore" (this library's state),
    "state" (Spark's state store provider's), else "other" (Spark's logs, ...)."""
    parts = urlsplit(target)
    segments = parts.path.split("/") + parse_qs(parts.query).get("prefix", [""])[0].split("/")
    return next((s for s in ("statestore", "state") if s in segments), "other")


def request_kind(method: str, target: str) -> str:
    """PUT, GET, LIST, HEAD, DELETE or POST (multipart uploads, bulk deletes) of a request."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    path = parts.path.strip("/")
    if method == "GET" and ("/" not in path or "list-type" in query or "prefix" in query):
        return "LIST"  # a bucket's listing (path style: /bucket?list-type=2&prefix=...)
    if method == "POST" and "delete" in query:
        return "DELETE"
    return method


def _logged(kind: str, target: str) -> str:
    """How a request is logged: its path, and a listing's prefix (`/bucket?prefix=query/...`)."""
    parts = urlsplit(target)
    prefix = parse_qs(parts.query).get("prefix", [None])[0]
    return f"{parts.path}?prefix={prefix}" if kind == "LIST" and prefix is not None else parts.path


@dataclass
class Faults:
    """What the proxy does to the next requests (changed by the test while clients run)."""

    latency: float = 0.0  # seconds added before each request is forwarded
    errors: collections.deque = field(default_factory=collections.deque)  # statuses to answer next
    cut: int = 0  # the next `cut` GET responses with a body are cut half way
    kinds: frozenset = frozenset()  # errors/cuts only for these kinds (empty: every kind)
    area: str | None = None  # errors/cuts only for requests of this area (`request_area`)
    # the store stops when a request that this says yes to (its kind and logged path) comes
    # in, before answering it; once (`S3Proxy.stopped` is set then)
    stop_at: Callable[[str, str], bool] | None = None


class S3Proxy:
    """`S3Proxy(upstream).start()`; `endpoint` is `127.0.0.1:<port>`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream  # host:port of the S3 server
        self.faults = Faults()
        self.counts: collections.Counter = collections.Counter()
        self.bytes: collections.Counter = collections.Counter()  # "up" (request bodies), "down"
        self.injected: collections.Counter = collections.Counter()
        self.stopped = threading.Event()  # set when `faults.stop_at` stopped the store
        self.log: list[tuple[str, str]] = []  # (kind, path) of each request since reset_counts (a LIST: with its prefix)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> S3Proxy:
        """Listen (on the same port as before when started again) and serve in a thread."""
        proxy = self

        class Handler(_Handler):
            owner = proxy

        ThreadingHTTPServer.allow_reuse_address = True
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, name="s3-proxy", daemon=True).start()
        return self

    @property
    def running(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        """Stop as a store does: the open connections are closed and new ones refused
        until `start`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            connections, self._connections = self._connections, set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()
            self.bytes.clear()
            self.log.clear()

    def snapshot(self, area: str | None = None) -> dict[str, int]:
        """Requests by kind and bytes up and down so far (`area`: only the requests whose
        key has the segment `area`, such as "statestore" or Spark's "state")."""
        with self._lock:
            total: collections.Counter = collections.Counter()
            for (kind, where), n in self.counts.items():  # summed over the areas when `area` is None
                if area is None or where == area:
                    total[kind] += n
            up = sum(n for (d, a), n in self.bytes.items() if d == "up" and (area is None or a == area))
            down = sum(n for (d, a), n in self.bytes.items() if d == "down" and (area is None or a == area))
            return {**total, "bytes_up": up, "bytes_down": down}

    def _count(self, kind: str, area: str, path: str, up: int, down: int) -> None:
        with self._lock:
            self.log.append((kind, path))
            self.counts[kind, area] += 1
            self.bytes["up", area] += up
            self.bytes["down", area] += down

    def _stops_at(self, kind: str, path: str) -> bool:
        """Whether this request stops the store (`Faults.stop_at`, which is then cleared)."""
        with self._lock:
            stop_at = self.faults.stop_at
            if stop_at is None or not stop_at(kind, path):
                return False
            self.faults.stop_at = None
            return True

    def _fault(self, kind: str, area: str) -> tuple[int | None, bool]:
        """(an error status to answer, or None; whether to cut the response) for a request."""
        with self._lock:
            applies = (not self.faults.kinds or kind in self.faults.kinds) and self.faults.area in (None, area)
            if applies and self.faults.errors:
                status = self.faults.errors.popleft()
                self.injected[status] += 1
                return status, False
            if applies and kind == "GET" and self.faults.cut > 0:
                self.faults.cut -= 1
                self.injected["cut"] += 1
                return None, True
        return None, False


_ERRORS = {503: ("SlowDown", "Please reduce your request rate."), 500: ("InternalError", "We encountered an internal error.")}


class _Handler(BaseHTTPRequestHandler):
    owner: S3Proxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner._connections.add(self.connection)

    def finish(self) -> None:
        with self.owner._lock:
            self.owner._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass  # the proxy was stopped under this connection

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self) -> None:
        owner = self.owner
        kind, area = request_kind(self.command, self.path), request_area(self.path)
        body = self._body()
        if owner.faults.latency:
            time.sleep(owner.faults.latency)
        if owner._stops_at(kind, _logged(kind, self.path)):
            owner.stop()  # this connection too: the request gets no answer
            owner.stopped.set()
            return
        status, cut = owner._fault(kind, area)
        if status is not None:
            code, message = _ERRORS.get(status, ("InternalError", "injected"))
            payload = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
            if self.command == "HEAD":
                payload = b""  # a HEAD answer has no body
            owner._count(kind, area, _logged(kind, self.path), len(body), 0)  # before the answer (see below)
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        host, port = owner.upstream.rsplit(":", 1)
        upstream = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "content-length"}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            cut = cut and self.command != "HEAD" and len(data) > 1
            if not cut:  # counted before the client has its answer: once it has, the log already holds it
                owner._count(kind, area, _logged(kind, self.path), len(body), len(data) if self.command != "HEAD" else 0)
            self.send_response_only(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in _HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
            self.send_header("Content-Length", length or "0")
            self.end_headers()
            if self.command != "HEAD":
                if cut:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(data)
        finally:
            upstream.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _relay
