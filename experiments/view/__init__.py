"""``medmis view``: a local case browser over a run, on the DuckDB engine of the analysis."""

from typing import TYPE_CHECKING

from medmis.tools import lazy_exports

from ._args import add_parser as add_parser  # `medmis view`: importable, not in __all__

if TYPE_CHECKING:
    from ._engine import FILTERS, OUTCOMES, Query, RunView
    from ._server import make_server, serve_in_thread
    from ._server import run as run  # `medmis view` itself: not in __all__

_HOME = {"FILTERS": "_engine", "OUTCOMES": "_engine", "Query": "_engine", "RunView": "_engine",
         "make_server": "_server", "run": "_server", "serve_in_thread": "_server"}
__getattr__ = lazy_exports(__name__, _HOME, globals())

__all__ = ["FILTERS", "OUTCOMES", "Query", "RunView", "make_server", "serve_in_thread"]
