"""``medmis data validate`` and ``medmis data subset`` (parsers and handlers).

``subset`` draws a seeded stratified subset of a release, so many items per subset.

The paper's sensitivity and defensive-prompt studies (arXiv 2606.12291 §D.1, §D.3) use one
600-item subset: 150 MEDMISQA, 180 MEDMISMCQA, 120 MEDMISXPERTQA, 120 MEDMISJOURNEY and 30
MEDMISHLE items. ``medmis data subset SRC --per-subset MEDMISQA=150,... --seed S --out FILE``
draws such a subset: within each subset the items are spread over content x provenance strata
in proportion to their sizes (largest remainders), each stratum drawn at random from a seed
that names it, so the same release and seed give the same items on every machine. The rows
are written in the released flattened schema (JSONL, subsets in the order given, items in
source order), ready for ``--data``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medmis.experiments._errors import CliError

if TYPE_CHECKING:  # the data types load with the command that reads data, not with `medmis --help`
    from medmis.experiments.benchmark import Item

PAPER_SUBSET = "MEDMISQA=150,MEDMISMCQA=180,MEDMISXPERTQA=120,MEDMISJOURNEY=120,MEDMISHLE=30"
"""The 600-item subset of the paper's generator-swap and defensive-prompt studies (§D.1)."""

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def per_subset(text: str) -> dict[str, int]:
    """``SUBSET=N,...`` as {canonical subset: N}; an argparse ``type``."""
    from medmis.experiments.benchmark import canonical_subset

    counts: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        name, sep, number = part.partition("=")
        if not part or not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"expected SUBSET=N[,SUBSET=N...], got {text!r}")
        try:
            n = int(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name.strip()}: expected a whole number, got {number!r}") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{name.strip()}: must be >= 1, got {n}")
        subset = canonical_subset(name)
        if subset in counts:
            raise argparse.ArgumentTypeError(f"{subset} is given twice")
        counts[subset] = n
    return counts


def add_data_parsers(sub: Any) -> None:
    """Add ``medmis data`` (``validate`` and ``subset``) to the command's subparsers."""
    from medmis.experiments._cli_flags import add_hub_repo_flag

    data = sub.add_parser("data", help="dataset utilities")
    dsub = data.add_subparsers(dest="data_command", required=True)
    val = dsub.add_parser("validate", help="validate a data file; exit 0 when valid")
    val.add_argument("path", help="JSONL/CSV/Parquet file, folder, hub:SUBSET or hub:all")
    val.add_argument("--subset", default=None, help="check one subset only")
    add_hub_repo_flag(val)
    sub = dsub.add_parser(
        "subset",
        help="write a seeded stratified subset (N items per subset) in the released schema",
        description="Draw N items per subset, spread over content x provenance in proportion, "
        "seeded; write them as released-schema JSONL. The paper's 600-item subset: "
        f"--per-subset {PAPER_SUBSET}",
    )
    sub.add_argument("source", help="a release: file, folder, hub:all")
    sub.add_argument("--per-subset", required=True, type=per_subset, metavar="SUBSET=N[,SUBSET=N...]",
                     help="how many items to draw from each subset (canonical or dataset-card names)")
    sub.add_argument("--seed", type=int, default=0, help="the draw's seed (same seed, same items)")
    sub.add_argument("--out", required=True, help="the JSONL file to write (must not exist)")
    add_hub_repo_flag(sub)


def run_data(args: argparse.Namespace) -> int:
    """Handle ``medmis data validate|subset``; returns the exit status."""
    if args.data_command == "subset":
        return run_subset(args)
    from medmis.experiments.benchmark import validate_command

    return validate_command(args.path, subset=args.subset, hub_repo=args.hub_repo)


def draw_subset(items: Sequence[Item], counts: Mapping[str, int], seed: int) -> list[Item]:
    """``counts[subset]`` items of each subset (subsets in the order of ``counts``), stratified
    by content x provenance within the subset and seeded.

    Raises:
        CliError: A subset is missing or has fewer items than asked for.
    """
    from medmis.experiments.generate import stratified_sample

    by_subset: dict[str, list[Item]] = {}
    for item in items:
        by_subset.setdefault(item.subset, []).append(item)
    chosen: list[Item] = []
    for subset, n in counts.items():
        pool = by_subset.get(subset, [])
        if len(pool) < n:
            have = ", ".join(f"{s} {len(v)}" for s, v in by_subset.items())
            raise CliError(f"{subset}: {n} items asked for, the data has {len(pool)} ({have})")
        # the stratum seeds name the subset: each subset's draw is independent of the others
        chosen += stratified_sample(pool, n, seed)
    return chosen


def item_row(item: Item) -> dict[str, Any]:
    """An item as a released row (options and sentences under their column letters)."""
    numeric = item.gold.isdigit()
    row: dict[str, Any] = {"id": item.id, "subset": item.subset,
                           "question": item.question_for("paper"), "answer": item.gold}
    for key, text in item.options.items():
        letter = _LETTERS[int(key) - 1] if numeric else key.lower()
        row[f"op{letter}"] = text
        if key in item.contexts:
            row[f"inject{letter}"] = item.contexts[key]
    if item.content_type is not None:
        row["injection_content"] = item.content_type
    if item.provenance is not None:
        row["injection_provenance"] = item.provenance
    return row


def run_subset(args: argparse.Namespace) -> int:
    """Handle ``medmis data subset``; returns the exit status (errors raise ``CliError``)."""
    from medmis.experiments.benchmark import load_dataset

    out = Path(args.out)
    if out.suffix.lower() != ".jsonl":
        raise CliError(f"--out {out}: the subset is written as JSONL (name it *.jsonl)")
    if out.exists():
        raise CliError(f"--out {out} exists; remove it or choose another file")
    if not out.parent.is_dir():
        raise CliError(f"--out {out}: no folder {out.parent}")
    dataset = load_dataset(args.source, hub_repo=args.hub_repo)
    chosen = draw_subset(dataset.items, args.per_subset, args.seed)
    text = "".join(json.dumps(item_row(it), ensure_ascii=False) + "\n" for it in chosen)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    counts = ", ".join(f"{s} {n}" for s, n in args.per_subset.items())
    print(f"wrote {out}: {len(chosen)} items ({counts}), seed {args.seed}, from {args.source}")
    return 0
