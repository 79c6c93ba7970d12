"""``medmis view RUN_DIR [--port N]``: the case browser, served on 127.0.0.1.

Routes: ``/`` the page, ``/app.js`` its script, ``/api/facets`` the filter values,
``/api/cases`` a page of cases (see :class:`._engine.Query` for the parameters) and
``/api/case`` one case in full. Responses are JSON (``{"error": ...}`` with status 400/404
on a bad request) under a Content-Security-Policy that allows only this origin's script.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from medmis.experiments._errors import CliError

from ._args import add_parser as add_parser
from ._engine import Query, RunView
from ._page import PAGE, SCRIPT

_CSP = ("default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def make_server(view: RunView, port: int = 0) -> ThreadingHTTPServer:
    """A server bound to 127.0.0.1 (``port`` 0 picks a free one); call ``serve_forever``."""

    class Handler(BaseHTTPRequestHandler):
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

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            params = parse_qs(url.query, keep_blank_values=False)
            try:
                if url.path in ("/", "/index.html"):
                    self._send(200, PAGE.encode(), "text/html; charset=utf-8")
                elif url.path == "/app.js":
                    self._send(200, SCRIPT.encode(), "text/javascript; charset=utf-8")
                elif url.path == "/api/facets":
                    self._json(200, view.facets())
                elif url.path == "/api/cases":
                    self._json(200, view.page(Query.from_params(params)))
                elif url.path == "/api/case":
                    def one(name: str) -> str | None:
                        values = params.get(name)
                        return values[-1] if values else None
                    found = view.case(one("model") or "", one("defender") or "", one("protocol") or "",
                                      one("item_key") or "", one("target"))
                    self._json(200, found) if found else self._json(404, {"error": "no such case"})
                else:
                    self._json(404, {"error": f"no route {url.path}"})
            except ValueError as exc:
                self._json(400, {"error": str(exc)})

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    run_dir = Path(args.run_dir)
    if not (run_dir / "records.jsonl").exists():
        raise CliError(f"{run_dir}: no records.jsonl here")
    view = RunView(run_dir, baseline=args.baseline)
    server = make_server(view, args.port)
    print(f"medmis view: http://127.0.0.1:{server.server_address[1]}/  (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        view.close()
    return 0


def serve_in_thread(view: RunView, port: int = 0) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Start a server on a background thread (for tests and the bench); ``shutdown()`` stops it."""
    server = make_server(view, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread
