"""``medmis view``: a local case browser over a run, on the DuckDB engine of the analysis."""

from ._engine import FILTERS, OUTCOMES, Query, RunView
from ._server import add_parser, make_server, run, serve_in_thread

__all__ = ["FILTERS", "OUTCOMES", "Query", "RunView", "add_parser", "make_server", "run", "serve_in_thread"]
