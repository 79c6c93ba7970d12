"""medmis's pytest plug-in, registered as ``medmis.testing`` (entry point ``pytest11``: ``medmis``):
fixtures for your own tests. This module is their one home; ``medmis.testing`` re-exports them.

Installing medmis registers these fixtures in every pytest session of that environment, so
this module imports nothing heavy at load time (no LangChain, no DuckDB): each fixture imports
what it needs when a test asks for it.

``medmis_replay``
    ``medmis_replay("path/to.cassette.jsonl")`` imports a cassette (``medmis cache export``'s
    JSONL) into a fresh store under the test's ``tmp_path`` and returns a :class:`Replay`:
    ``replay.config(data=..., models=..., defenders=...)`` is a ``RunConfig`` that replays from
    it (``cache="replay"``: a call the cassette lacks fails its case, nothing is sent), and
    ``replay.run(...)`` runs one and returns the ``RunResult``.
``medmis_no_network``
    Refuses every socket connection to an address that is not loopback (127.0.0.0/8, ::1,
    ``localhost``) and every name lookup of another host, before anything is sent: the attempt
    raises :class:`NetworkBlocked`, and the test fails at teardown even when the code under test
    caught the error. Local servers on 127.0.0.1 keep working; a test marked
    ``@pytest.mark.medmis_no_network(loopback=False)`` refuses loopback too.
``medmis_case_view``
    ``medmis_case_view(protocol="type1")`` is the ``CaseView`` a defender is given for the toy
    scurvy item (or ``item=``); ``medmis_case_view(question=..., options=..., context=[...])``
    builds one from text.
``medmis_scripted_model``
    ``medmis_scripted_model(["Final answer: B"])`` is a ``ScriptedChatModel`` replaying those
    outputs (strings, ``AIMessage``s or a callable ``(messages, tools) -> output``); with no
    outputs it is the fake examinee of ``medmis.defenses.testing`` for the toy item.

``bundled_fixture``
    ``bundled_fixture("cassettes/search_agent_hle.jsonl")`` is the absolute path of a file
    medmis ships (the sample items ``medmisbench_sample.jsonl``, the local corpus ``corpus/``,
    the search-agent cassette, the sample poisoned pages), wherever medmis is installed and
    whatever the working directory: a test written against it runs outside the clone.

``check_defender`` (the shared defender contract) stays in :mod:`medmis.defenses.testing`;
it is re-exported here.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from medmis.agents._mock import ScriptedChatModel
    from medmis.defenses import CaseView
    from medmis.defenses.testing import check_defender
    from medmis.experiments.benchmark._types import Item
    from medmis.experiments.harness._config import RunConfig, RunResult

__all__ = ["BUNDLED_FIXTURES", "NetworkBlocked", "Replay", "bundled_fixture", "check_defender"]


def __getattr__(name: str) -> Any:
    if name == "check_defender":
        from medmis.defenses.testing import check_defender

        return check_defender
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- bundled files --------------------------------------------------------------------------

BUNDLED_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
"""The folder of the files medmis ships: ``fixtures/`` in the clone, ``medmis/fixtures/`` in an
installed wheel (pyproject's package-data); the same folder the corpus and examinee defaults read."""


def bundled_fixture(relative: str | Path) -> Path:
    """The absolute path of a file medmis ships, e.g. ``"cassettes/search_agent_hle.jsonl"``.

    Args:
        relative: The file's path under ``fixtures/``.

    Returns:
        Its absolute path (independent of the working directory).

    Raises:
        FileNotFoundError: medmis ships no such file (its name says which, and where it looked).
    """
    path = BUNDLED_FIXTURES / relative
    if ".." in Path(relative).parts or not path.is_file():
        raise FileNotFoundError(f"medmis ships no fixture {str(relative)!r} (looked in {BUNDLED_FIXTURES})")
    return path


# --- replay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Replay:
    """A store holding one cassette's recordings, ready to replay."""

    cassette: Path
    cache_dir: Path
    entries: int
    """Entries the cassette put into the store."""
    work_dir: Path

    def config(self, **fields: Any) -> RunConfig:
        """A ``RunConfig`` replaying from this store: ``fields`` as for ``RunConfig`` (``data``,
        ``models`` and ``defenders`` at least; a defender may be given by name); ``out``
        defaults to a fresh folder under the test's ``tmp_path``, progress and report are off,
        and a failed call is not retried."""
        from medmis.experiments.harness import DefenderConfig, RunConfig

        fields["defenders"] = [DefenderConfig(name=d) if isinstance(d, str) else d
                               for d in fields.get("defenders", [])]
        defaults = {"out": str(self.work_dir / "run"), "progress": False, "write_report": False,
                    "max_retries": 0}
        return RunConfig(**{**defaults, **fields, "cache": "replay", "cache_dir": str(self.cache_dir)})

    def run(self, **fields: Any) -> RunResult:
        """Run :meth:`config` (``fields``) to completion; call it from a plain (sync) test."""
        import asyncio

        from medmis.experiments.harness import run_experiment

        return asyncio.run(run_experiment(self.config(**fields), argv=["medmis_replay"]))


@pytest.fixture
def medmis_replay(tmp_path: Path) -> Callable[[str | Path], Replay]:
    """``medmis_replay(cassette)`` -> :class:`Replay` over a fresh store holding it."""
    made: list[int] = []

    def replay(cassette: str | Path) -> Replay:
        from medmis.tools import RecordStore, import_cassette

        path = Path(cassette)
        if not path.is_file():
            raise FileNotFoundError(f"no cassette at {path}")
        made.append(len(made))
        work = tmp_path / f"medmis-replay-{len(made)}"
        store_dir = work / "store"
        with RecordStore(store_dir, "record", expire_s=None) as store:
            entries = import_cassette(store, path)
        return Replay(cassette=path, cache_dir=store_dir, entries=entries, work_dir=work)

    return replay


# --- no network -----------------------------------------------------------------------------


class NetworkBlocked(OSError):
    """A connection (or name lookup) outside loopback under ``medmis_no_network``."""


_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def _is_loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    host = host.strip("[]").split("%", 1)[0]
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "medmis_no_network(loopback=True): with loopback=False, medmis_no_network "
        "refuses connections to loopback too")


@pytest.fixture
def medmis_no_network(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Refuse connections and name lookups outside loopback (everywhere, with the marker's
    ``loopback=False``); yields the refused attempts."""
    marker = request.node.get_closest_marker("medmis_no_network")
    loopback = bool(marker.kwargs.get("loopback", True)) if marker else True
    refused: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return  # Unix sockets and socket pairs stay on this machine
        host = address[0] if isinstance(address, tuple) else address
        if not (loopback and _is_loopback(host)):
            refused.append(f"connect {address!r}")
            raise NetworkBlocked(f"medmis_no_network: connection to {address!r} refused"
                                 + (" (not loopback)" if loopback else ""))

    def connect(self: socket.socket, address: Any) -> None:
        check(self, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(self, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not (loopback and _is_loopback(host)):
            refused.append(f"lookup {host!r}")
            raise NetworkBlocked(f"medmis_no_network: name lookup of {host!r} refused (not loopback)")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield refused
    if refused:
        pytest.fail(f"medmis_no_network: the test tried the network: {'; '.join(refused[:3])}",
                    pytrace=False)


# --- case views and scripted models ---------------------------------------------------------


@pytest.fixture
def medmis_case_view() -> Callable[..., CaseView]:
    """``medmis_case_view(protocol="clean", item=None, target=None)`` or
    ``medmis_case_view(question=..., options=..., context=(...))`` -> ``CaseView``."""

    def build(protocol: str = "clean", *, item: Item | None = None, target: str | None = None,
              question: str | None = None, options: Mapping[str, str] | None = None,
              context: Sequence[str] = ()) -> CaseView:
        from medmis.defenses.testing import toy_item, toy_view
        from medmis.experiments.benchmark import CaseView

        if question is not None or options is not None:
            if question is None or not options:
                raise ValueError("give both question= and options=")
            return CaseView(question=question, options=options, context=tuple(context))
        return toy_view(item or toy_item(), protocol, target)

    return build


@pytest.fixture
def medmis_scripted_model() -> Callable[..., ScriptedChatModel]:
    """``medmis_scripted_model(outputs=None, *, item=None, **examinee)`` -> ``ScriptedChatModel``."""

    def build(outputs: Any = None, *, item: Item | None = None, **examinee: Any) -> ScriptedChatModel:
        from medmis.agents import ScriptedChatModel
        from medmis.defenses.testing import FakeExaminee, toy_item

        if outputs is None:
            outputs = FakeExaminee(item or toy_item(), **examinee)
        elif examinee or item is not None:
            raise ValueError("item= and examinee options go with the fake examinee (no outputs)")
        return ScriptedChatModel(outputs=outputs)

    return build
