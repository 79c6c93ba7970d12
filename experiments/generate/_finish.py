"""How a generation ends: its exit status and summary line, its manifest, and the ``--price``
flag, shared by ``medmis generate`` and ``medmis generate pages``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from medmis.tools import ConfigError, redact_obj

EXIT_OK, EXIT_ERRORS, EXIT_STOPPED = 0, 1, 3


def exit_status(command: str, summary: str, *, stopped: bool, failed: bool) -> int:
    """Print a generation's summary line (and the budget stop) and return its exit status."""
    print(f"{command}: {summary}")
    if stopped:
        print(f"{command}: stopped at the --budget-usd cap; re-run to continue")
        return EXIT_STOPPED
    return EXIT_ERRORS if failed else EXIT_OK


def write_manifest_file(cfg: Any, fp: dict[str, Any], previous: dict[str, Any] | None, stopped: bool,
                        totals: dict[str, Any], fields: dict[str, Any]) -> None:
    """``OUT.manifest.json`` of a generation: its fingerprint, command, ``fields`` (prompt
    versions, ...), price, totals, versions and times, credentials masked."""
    from medmis.experiments.harness import package_versions, scrub_argv

    now = datetime.now(UTC).isoformat(timespec="seconds")
    manifest = {
        "fingerprint": fp,
        **{k: v for k, v in fields.items() if k == "decoding"},
        "command": scrub_argv(cfg.argv),
        **{k: v for k, v in fields.items() if k != "decoding"},
        "price_per_mtok": list(cfg.price) if cfg.price else None,
        "totals": totals,
        "versions": package_versions(),
        "created": (previous or {}).get("created", now),
        "updated": now,
        "stopped": "budget" if stopped else None,
    }
    cfg.side(".manifest.json").write_text(json.dumps(redact_obj(manifest), indent=2, ensure_ascii=False) + "\n",
                                          encoding="utf-8")


def parse_price(text: str | None) -> tuple[float, float] | None:
    """``--price IN,OUT`` (USD per million tokens) of the generate commands, or None."""
    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"--price expects IN,OUT in USD per million tokens, got {text!r}") from None
    return a, b
