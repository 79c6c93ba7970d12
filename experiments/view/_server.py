"""``medmis view RUN_DIR [--port N]``: the case browser, served on 127.0.0.1.

Routes: ``/`` the page, ``/app.js`` its script, ``/api/facets`` the filter values,
``/api/cases`` a page of cases (see :class:`._engine.Query` for the parameters) and
``/api/case`` one case in full. Responses are JSON (``{"error": ...}`` with status 400/404
on a bad request) under a Content-Security-Policy that allows only this origin's script.

A request whose ``Host`` is not this server (``127.0.0.1``, ``localhost`` or ``[::1]`` with
its port) is refused with 403: a page on another site that has its name re-pointed at
127.0.0.1 (DNS rebinding) sends its own name, so it cannot read the run.
"""

from __future__ import annotations

import argparse
import errno
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from medmis.tools import ConfigError

from ._args import add_parser as add_parser
from ._engine import Query, RunView, text_param
from ._page import PAGE, SCRIPT

_LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_CSP = ("default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class ViewServer(ThreadingHTTPServer):
    """The case browser's HTTP server; ``view`` is the run it serves (set before serving)."""

    view: RunView


def make_server(view: RunView | None, port: int = 0) -> ViewServer:
    """A server bound to 127.0.0.1 (``port`` 0 picks a free one); call ``serve_forever``.

    Raises:
        OSError: When the port cannot be bound (``EADDRINUSE``: in use).
    """

    class Handler(BaseHTTPRequestHandler):
        server: ViewServer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request would drown the URL the user needs

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Security-Policy", _CSP)
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj, ensure_ascii=False, default=str).encode(),
                       "application/json; charset=utf-8")

        def _local_host(self) -> bool:
            port = self.server.server_address[1]
            host = (self.headers.get("Host") or "").strip().lower()
            names = {f"{h}:{port}" for h in _LOCAL_HOSTS}
            return host in names or (port == 80 and host in _LOCAL_HOSTS)

        def do_GET(self) -> None:
            if not self._local_host():
                port = self.server.server_address[1]
                self._json(403, {"error": f"this server answers only to 127.0.0.1:{port}, "
                                          f"localhost:{port} or [::1]:{port}"})
                return
            url = urlsplit(self.path)
            try:
                params = parse_qs(url.query, keep_blank_values=False, strict_parsing=False,
                                  errors="strict", max_num_fields=100)
            except (ValueError, UnicodeDecodeError) as exc:
                self._json(400, {"error": f"unreadable query string ({str(exc)[:80]})"})
                return
            try:
                if url.path in ("/", "/index.html"):
                    self._send(200, PAGE.encode(), "text/html; charset=utf-8")
                elif url.path == "/app.js":
                    self._send(200, SCRIPT.encode(), "text/javascript; charset=utf-8")
                elif url.path == "/api/facets":
                    self._json(200, self.server.view.facets())
                elif url.path == "/api/cases":
                    self._json(200, self.server.view.page(Query.from_params(params)))
                elif url.path == "/api/case":
                    def one(name: str) -> str | None:
                        return text_param(params, name)
                    epoch = one("epoch") or "0"
                    if not epoch.isdigit():
                        raise ValueError(f"epoch must be a whole number, got {epoch!r}")
                    found = self.server.view.case(one("model") or "", one("defender") or "",
                                                  one("protocol") or "", one("item_key") or "", one("target"),
                                                  int(epoch))
                    self._json(200, found) if found else self._json(404, {"error": "no such case"})
                else:
                    self._json(404, {"error": f"no route {url.path}"})
            except ValueError as exc:
                self._json(400, {"error": str(exc)})
            except Exception as exc:  # one line on the console and a JSON 500, never an empty reply
                print(f"medmis view: {url.path}: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
                self._json(500, {"error": f"internal error ({type(exc).__name__})"})

    server = ViewServer(("127.0.0.1", port), Handler)
    if view is not None:
        server.view = view
    return server


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    run_dir = Path(args.run_dir)
    if not (run_dir / "records.jsonl").exists():
        raise ConfigError(f"{run_dir}: no records.jsonl here")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be within 0..65535, got {args.port}")
    try:  # before the run is loaded: a busy port costs nothing
        server = make_server(None, args.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {args.port} is in use; pass --port") from None
        raise ConfigError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}") from None
    try:
        view = RunView(run_dir, baseline=args.baseline)
    except BaseException:
        server.server_close()
        raise
    server.view = view
    print(f"medmis view: http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        view.close()
    return 0


def serve_in_thread(view: RunView, port: int = 0) -> tuple[ViewServer, threading.Thread]:
    """Start a server on a background thread (for tests and the bench); ``shutdown()`` stops it."""
    server = make_server(view, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
