"""The dashboard's web server: the page and its JSON API over one records database,
with the standard library's threading HTTP server.

    GET /                          the page (plots drawn in the browser, nothing fetched from elsewhere)
    GET /api/workloads             every workload with its targets
    GET /api/workloads/<id>?top=N  one workload: runs, times, failures, best configurations, comparison

A malformed id or parameter is a 400, an unknown workload or path a 404, any method
but GET or HEAD a 405; every error is JSON `{"error": "..."}` naming the problem.

Example:
    >>> import os, tempfile, threading, urllib.request, json
    >>> from tensortune.db import Database
    >>> server = make_server(Database(os.path.join(tempfile.mkdtemp(), "t.db")), "127.0.0.1", 0)
    >>> threading.Thread(target=server.serve_forever, daemon=True).start()
    >>> url = f"http://127.0.0.1:{server.server_address[1]}/api/workloads"
    >>> json.load(urllib.request.urlopen(url))["workloads"]
    []
    >>> server.shutdown(); server.server_close()
"""

from __future__ import annotations

import json
import socket
import urllib.parse
import warnings
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..db import DamagedRecords, Database, DatabaseError
from .page import page_html
from .views import BadRequest, NotFound, Summaries, check_top, workload_view, workloads_view


class DashboardServer(ThreadingHTTPServer):
    """A threading HTTP server that holds the database and its label."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], db: Database, label: str) -> None:
        super().__init__(address, _Handler)
        self.db = db
        self.label = label
        self.summaries: Summaries = {}  # workloads_view's cache


class _DashboardServer6(DashboardServer):
    address_family = socket.AF_INET6


def make_server(db: Database, host: str = "127.0.0.1", port: int = 8765, label: str = "") -> DashboardServer:
    """A server bound to `host:port` (port 0: any free port, see `server_address`); an
    IPv6 address such as ::1 listens on IPv6."""
    kind = _DashboardServer6 if ":" in host else DashboardServer
    return kind((host, port), db, label or str(getattr(db, "path", "")))


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a local tool: requests are not worth a line each on the terminal

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, _json_bytes({"error": f"{self.command} is not allowed: "
                                                               "the dashboard only reads (GET)"}),
                   "application/json", extra={"Allow": "GET, HEAD", "Connection": "close"})
        self.close_connection = True  # its body, if any, was not read

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _route(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        try:
            if not parts:
                body, kind = page_html().encode(), "text/html; charset=utf-8"
            elif parts[0] == "api":
                body, kind = _json_bytes(self._api(parts[1:], query)), "application/json"
            else:
                raise NotFound(f"no page at {url.path!r}; the dashboard is at /")
            status = HTTPStatus.OK
        except BadRequest as exc:
            status, body, kind = HTTPStatus.BAD_REQUEST, _json_bytes({"error": str(exc)}), "application/json"
        except NotFound as exc:
            status, body, kind = HTTPStatus.NOT_FOUND, _json_bytes({"error": str(exc)}), "application/json"
        except DatabaseError as exc:
            status, body, kind = (HTTPStatus.SERVICE_UNAVAILABLE, _json_bytes({"error": str(exc)}),
                                  "application/json")
        self._send(status, body, kind, head=head)

    def _api(self, parts: list[str], query: dict[str, list[str]]) -> dict[str, Any]:
        db = self.server.db
        unknown = sorted(set(query) - {"top"})
        if unknown:
            raise BadRequest(f"unknown parameter(s) {unknown}; the API takes only 'top'")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DamagedRecords)  # reported in the answer instead
            if parts == ["workloads"]:
                answer: dict[str, Any] = {"workloads": workloads_view(db, self.server.summaries)}
            elif len(parts) == 2 and parts[0] == "workloads":
                top = check_top(query.get("top", [None])[-1])
                answer = workload_view(db, parts[1], top)
            else:
                raise NotFound(f"no API endpoint /api/{'/'.join(parts)}; there are /api/workloads and "
                               "/api/workloads/<id>")
        answer["database"] = {"label": self.server.label, "read_only": bool(getattr(db, "read_only", False)),
                              "damaged": len(getattr(db, "damaged", {}))}
        return answer

    def _send(self, status: HTTPStatus, body: bytes, kind: str, head: bool = False,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)
