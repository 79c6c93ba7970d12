"""``medmis review sample|form|analyze``: the parser set-up and the handler, kept out of
``experiments/cli.py`` (which only calls :func:`add_parser` and :func:`run`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ._keys import DEFAULT_STRATIFY, STRATA

EXIT_CONFIG = 2


def add_parser(sub: Any) -> None:
    """Add the ``review`` command and its three subcommands to ``sub`` (argparse subparsers)."""
    review = sub.add_parser("review", help="clinician review: sample cases, offline rating forms, analysis")
    rsub = review.add_subparsers(dest="review_command", required=True)
    rs = rsub.add_parser("sample", help="stratified, seeded sample of a run's Type 1 cases -> PACK/tasks.jsonl")
    rs.add_argument("run_dir", help="run folder to sample from")
    rs.add_argument("--n", type=int, required=True, help="number of tasks")
    rs.add_argument("--out", required=True, help="new pack folder")
    rs.add_argument("--models", action="append", default=[], help="only these models (comma-separated)")
    rs.add_argument("--defenders", action="append", default=[], help="only these defenders (comma-separated)")
    rs.add_argument("--stratify", default=",".join(DEFAULT_STRATIFY),
                    help=f"keys among {','.join(STRATA)} ('' for a simple random sample)")
    rs.add_argument("--dual", type=float, default=0.7, help="share of tasks rated by two reviewers (default 0.7)")
    rs.add_argument("--reviewers", default=None, metavar="FILE",
                    help="reviewer names, one per line (default: reviewer-1, reviewer-2)")
    rs.add_argument("--seed", type=int, default=0, help="seed of the sample and the assignment (default 0)")
    rf = rsub.add_parser("form", help="one offline HTML rating form per reviewer -> PACK/forms/")
    rf.add_argument("pack", help="pack folder written by `review sample`")
    rr = rsub.add_parser("rubrics", help="a rubric file as a checklist for clinicians -> DIR/rubric_review.md/.csv")
    rr.add_argument("rubrics", help="rubric file (JSONL, `medmis grade --rubrics`)")
    rr.add_argument("--data", required=True, help="the items the rubrics are for (released schema)")
    rr.add_argument("--out", required=True, help="folder for rubric_review.md and rubric_review.csv")
    ra = rsub.add_parser("analyze", help="validate ratings and write review.json, review.md and plots")
    ra.add_argument("pack", help="pack folder written by `review sample`")
    ra.add_argument("ratings", nargs="+", metavar="RATINGS.csv", help="ratings exported from the forms")
    ra.add_argument("--out", required=True, help="folder for review.json, review.md and plots/")
    ra.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the regression fit")


def _split(values: Sequence[str]) -> list[str]:
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def run_review(args: argparse.Namespace) -> int:
    """Run ``medmis review ...``; bad input prints one line per problem and returns 2."""
    from ._pack import ReviewError, read_reviewers

    try:
        if args.review_command == "sample":
            from ._sample import sample_pack

            extra: dict[str, Any] = {}
            if args.reviewers:
                extra["reviewers"] = read_reviewers(args.reviewers)
            info = sample_pack(args.run_dir, args.out, n=args.n, models=_split(args.models) or None,
                               defenders=_split(args.defenders) or None,
                               stratify=_split([args.stratify]), dual=args.dual, seed=args.seed, **extra)
            print(f"{info['n']} tasks ({info['dual_rated']} dual-rated) from {info['population']} eligible "
                  f"Type 1 cases -> {args.out}/tasks.jsonl; load: "
                  + ", ".join(f"{r} {k}" for r, k in info["load"].items()))
        elif args.review_command == "rubrics":
            from ._rubric_pack import write_rubric_pack

            done = write_rubric_pack(args.rubrics, args.data, args.out)
            print(f"{done['criteria']} criteria of {done['items']} items -> {done['out']}/rubric_review.csv"
                  + (f"; {done['problems']} flagged in its check column" if done["problems"] else ""))
        elif args.review_command == "form":
            from ._form import write_forms

            for reviewer, path in write_forms(args.pack).items():
                print(f"{reviewer}: {path}")
        else:
            from ._report import analyze_pack

            for name, path in analyze_pack(args.pack, args.ratings, args.out, seed=args.seed).items():
                print(f"{name}: {path}")
    except ReviewError as exc:
        lines = str(exc).strip().splitlines()
        print(f"medmis: {lines[0]}", file=sys.stderr)
        for line in lines[1:]:
            print(f"  {line}", file=sys.stderr)
        return EXIT_CONFIG
    return 0
