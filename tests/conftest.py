"""Shared test fixtures. Tests never reach the network: live-API tests are marked ``live``."""

from __future__ import annotations

import functools
import io
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from httpx2_respx import routed_to_respx

from medmis.defenses import testing as defenses_testing
from medmis.experiments import Item

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"

# pytest keeps each test module's assertion-rewritten code in tests/__pycache__, its default.
# Under PYTHONDONTWRITEBYTECODE (set on this project's development machine) it would not, and
# every xdist worker would rewrite all the test modules again at every run: about 7 s of each
# worker's start. Set here, before the test modules are collected; child processes keep the
# environment's setting.
sys.dont_write_bytecode = False


@pytest.fixture(autouse=True)
def _httpx2_through_respx(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In tests that take ``respx_mock`` or whose module uses ``respx.mock``, the SDKs' ``httpx2``
    requests (openai's and anthropic's) reach respx's routes too (:mod:`httpx2_respx`); other
    tests keep ``httpx2``'s own transport."""
    if "respx_mock" not in request.fixturenames and not hasattr(request.module, "respx"):
        yield
        return
    with routed_to_respx(monkeypatch):
        yield


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the five packages once, in the controlling process, as a regular
    ``pip install`` does: the xdist workers and the dozens of ``python -m medmis`` child
    processes then load the modules instead of compiling 47,000 lines each (about 0.4 s per
    process; an editable install, or ``PYTHONDONTWRITEBYTECODE``, leaves that to every start).
    Up-to-date files are skipped, so a second run costs nothing."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall
    import importlib.util

    for name in ("agents", "tools", "graphs", "defenses", "experiments"):
        spec = importlib.util.find_spec(f"medmis.{name}")  # where the install loads it from
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=1)


@functools.cache
def _placeholder_png() -> bytes:
    """A valid 1x1 PNG: what a run's report links and embeds when its figures are not drawn."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (1, 1), "white").save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(autouse=True)
def _figures_drawn_where_tested(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Matplotlib draws a run's figures only in tests marked ``figures`` (and in child
    processes): elsewhere each figure ``write_plots`` decides to draw, and the poisoned grid's
    figure, is a 1x1 PNG under its file name, so the report links, embeds and lists the same
    files without 0.2-0.9 s of rendering per figure, a quarter of the suite's CPU. Which
    figures a report gets (``plot_keys``, a grid's share runs) is decided by the real code
    either way."""
    if request.node.get_closest_marker("figures") is not None:
        return
    from medmis.experiments.reporting import _plots, _poison

    def poison_placeholder(grid: object, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_placeholder_png())
        return path

    monkeypatch.setattr(_poison, "draw_poison_plot", poison_placeholder)

    def placeholders(out_dir: Path, metrics: object, keys: list[str]) -> dict[str, Path]:
        out = {}
        for key in keys:
            out[key] = Path(out_dir) / _plots.PLOT_FILES[key]
            out[key].write_bytes(_placeholder_png())
        return out

    monkeypatch.setattr(_plots, "draw_plots", placeholders)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def toy_item() -> Item:
    """A small hand-written item (not from the benchmark) for unit tests."""
    return defenses_testing.toy_item()


# Variables the provider SDKs read on their own; tests clear them so that nothing from the
# developer's shell (a real key, a gateway URL, Vertex mode) leaks into a mocked request.
PROVIDER_ENV: dict[str, tuple[str, ...]] = {
    "google": (
        "GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_API_VERSION",
        "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_GENAI_HTTP_CLIENT",
        "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION",
    ),
    "openai": (
        "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_ORG_ID",
        "OPENAI_ORGANIZATION", "LANGSMITH_GATEWAY",
    ),
    "anthropic": (
        "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_URL", "ANTHROPIC_AUTH_TOKEN",
        "LANGSMITH_GATEWAY", "LANGSMITH_GATEWAY_API_KEY",
    ),
}


def clear_provider_env(monkeypatch: pytest.MonkeyPatch, *providers: str) -> None:
    for provider in providers:
        for name in PROVIDER_ENV[provider]:
            monkeypatch.delenv(name, raising=False)


def interrupt_run(cmd: list[str], records: Path, after: int = 3) -> tuple[int, str]:
    """Start ``cmd`` (a ``medmis run``), send SIGINT to it once ``records`` holds ``after``
    lines; its exit code and stderr."""
    import signal
    import subprocess
    import time

    # a shell without job control starts background commands with SIGINT ignored, which the
    # child would inherit: give it the default disposition, as a terminal's Ctrl-C meets it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if records.exists() and len(records.read_text().splitlines()) >= after:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # the process only, as `kill -INT` would
    _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr
