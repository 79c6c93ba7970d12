"""``medmis export inspect|parquet RUN_DIR [--out DIR]``: parser and handler."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_export_parser", "run_export"]


def add_export_parser(sub: Any) -> None:
    """Add ``medmis export`` and its two formats to the ``medmis`` subparsers."""
    export = sub.add_parser("export", help="write a run as Inspect AI logs or as a Parquet results dataset")
    esub = export.add_subparsers(dest="export_command", required=True)
    ins = esub.add_parser("inspect", help="one Inspect AI eval log per model x defender (needs medmis[inspect])")
    ins.add_argument("run_dir", metavar="RUN_DIR", help="run folder (records.jsonl, metrics.json, traces/)")
    ins.add_argument("--out", default=None, metavar="DIR", help="folder for the .eval logs (default RUN_DIR/inspect)")
    par = esub.add_parser("parquet", help="records, metrics and manifest as Parquet/JSON with a dataset card")
    par.add_argument("run_dir", metavar="RUN_DIR", help="run folder (records.jsonl, metrics.json)")
    par.add_argument("--out", default=None, metavar="DIR", help="dataset folder (default RUN_DIR/dataset)")
    par.add_argument("--license", default="other", metavar="ID",
                     help="license id for the card's YAML header (default: other)")


def run_export(args: argparse.Namespace) -> int:
    """Write the export and print each file written; 0."""
    if args.export_command == "inspect":
        from ._inspect import export_inspect

        paths = export_inspect(args.run_dir, args.out)
    else:
        from ._dataset import export_parquet

        paths = export_parquet(args.run_dir, args.out, license=args.license)
    for path in paths:
        print(path)
    return 0
