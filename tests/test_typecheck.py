"""A plug-in author's type checker sees medmis: after `pip install -e .` (the README's command),
plain `mypy` over a file outside the clone resolves ``medmis.agents`` through the install and
reports a type error against it (not "Cannot find implementation" / "missing py.typed", and not
a silent pass).

The author's mypy settings (``mypy.ini`` beside the probe) follow ``medmis`` and pydantic (whose
models give ``RunSpec`` and ``Fingerprint`` their signatures) and skip the analysis of every other
installed package: how mypy finds ``medmis`` (the editable install, ``py.typed``) does not depend
on it, and checking langchain, langsmith, matplotlib and what they import (about 2,500 modules,
some 20 CPU seconds) tested nothing of ours (600 modules, about 6 s).
"""

from __future__ import annotations

import os
import site
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = '''\
from medmis.agents import RetryPolicy, estimate_tokens
from medmis.defenses import DefenderOptions
from medmis.experiments import RunSpec
from medmis.experiments.harness import Fingerprint

tokens: str = estimate_tokens("a question")
policy = RetryPolicy(max_retries="three")
options: DefenderOptions = 3
seed: str = Fingerprint().seed
spec = RunSpec(data="d", models="m", defenders=[])
'''

# skip: not looked at, typed as Any; medmis's own imports of other packages are found all the same
MYPY_INI = '''\
[mypy]
follow_imports = skip

[mypy-medmis.*,pydantic.*,pydantic_core.*]
follow_imports = normal
'''


def _dependency_folders() -> list[str]:
    return sorted({*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


@pytest.mark.typecheck
def test_plain_mypy_outside_the_clone_reports_errors_against_medmis(tmp_path: Path) -> None:
    # A fresh venv gets the dependencies (mypy among them) from the running environment through
    # a .pth of plain folder lines: their own .pth files (a checkout's editable install) are not
    # run, so medmis can only come from the editable install made here, as a user makes it.
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()
    Path(purelib, "_running_env.pth").write_text("\n".join(_dependency_folders()) + "\n", encoding="utf-8")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", "-e", str(ROOT)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    outside = tmp_path / "plugin"
    outside.mkdir()
    (outside / "probe.py").write_text(PROBE, encoding="utf-8")
    (outside / "mypy.ini").write_text(MYPY_INI, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "MYPYPATH"}}
    done = subprocess.run(
        [str(python), "-m", "mypy", "--no-incremental", "probe.py"],
        cwd=outside, capture_output=True, text=True, timeout=300, env=env,
    )
    out = done.stdout + done.stderr
    assert "import-not-found" not in out and "import-untyped" not in out, out
    assert 'probe.py:6: error: Incompatible types in assignment (expression has type "int"' in out, out
    assert 'probe.py:7: error: Argument "max_retries" to "RetryPolicy" has incompatible type "str"' in out, out
    assert "probe.py:8: error: Incompatible types in assignment" in out, out
    # the experiments' public face is typed too (not Any through its lazy export table)
    assert 'probe.py:9: error: Incompatible types in assignment (expression has type "int | None"' in out, out
    assert 'probe.py:10: error: Argument "models" to "RunSpec" has incompatible type "str"' in out, out
    assert "Found 5 errors in 1 file" in out and done.returncode == 1, out
