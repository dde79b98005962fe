"""Regenerate (or check) every `kdispatch simulate` figure in README.md and docs/simulate.md.

Each figure in a document sits between two markers, written by this script:

    <!-- figure NAME -->
    Printed by `kdispatch simulate ARGS` at commit abc1234 (`make docs-figures`):
    ```
    ...what the command printed...
    ```
    <!-- /figure -->

``python bench/docs_figures.py`` runs every figure's command and rewrites its block, stamped with
the current commit; ``--check`` rewrites nothing and fails if a block's text differs from what the
command prints now (simulate is deterministic, so any difference is a real change);
``--only NAME`` limits either to some figures (``tests/simulate/test_docs_figures.py`` checks the
small one on every ``make test``; the whole-trace ones take minutes and are checked here).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ALIBABA = "data/traces/alibaba-gpu-v2023"


@dataclass(frozen=True)
class Figure:
    name: str
    args: tuple[str, ...]
    # Which blank-line-separated sections of the output the documents show (None: all).
    sections: tuple[int, ...] | None = None

    @property
    def command(self) -> str:
        return "kdispatch simulate " + " ".join(self.args)


FIGURES = [
    # Small enough for `make test` (tests/simulate/test_docs_figures.py re-runs it).
    Figure("alibaba-first-1500", ("--trace", ALIBABA, "--limit", "1500")),
    # The whole trace at the default capacity scale (0.0085: 52.8 GPUs), the trace as recorded,
    # and the default scale with a ten times slower admission (sensitivity to the worker model).
    Figure("alibaba", ("--trace", ALIBABA)),
    Figure("alibaba-summary", ("--trace", ALIBABA), sections=(0, 1)),
    Figure("alibaba-admission-10s", ("--trace", ALIBABA, "--admission-latency", "10s"), sections=(0, 1, 2)),
    Figure("alibaba-as-recorded", ("--trace", ALIBABA, "--capacity-scale", "1"), sections=(0, 1)),
    # Workers with real nodes (--workers): wasted placements without and with node facts.
    Figure(
        "alibaba-nodes",
        ("--trace", ALIBABA, "--workers", "4", "--capacity-model", "both", "--limit", "1000", "--capacity-scale", "0.015"),
        sections=(0, 4),
    ),
    # What a waiting copy holds, varied (the profiles' own file).
    Figure("alibaba-holds", ("--trace", ALIBABA, "--profile", "docs/simulate-holds.yaml"), sections=(0, 1)),
]
DOCUMENTS = [REPO / "README.md", REPO / "docs" / "simulate.md"]

BLOCK = re.compile(
    r"<!-- figure (?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /figure -->", re.DOTALL
)
FENCE = re.compile(r"```\n(?P<text>.*?)```\n", re.DOTALL)


def output_of(figure: Figure, cache: dict[tuple[str, ...], str]) -> str:
    """What the command prints on stdout, cut to the figure's sections."""
    if figure.args not in cache:
        from reconciler.cli import main

        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            code = main(["simulate", *figure.args, "--quiet"])
        if code != 0:
            raise SystemExit(f"{figure.command} exited with {code}")
        cache[figure.args] = buffer.getvalue()
    text = cache[figure.args]
    if figure.sections is None:
        return text
    sections = text.rstrip("\n").split("\n\n")
    return "\n\n".join(sections[i] for i in figure.sections) + "\n"


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def block(figure: Figure, text: str, stamp: str) -> str:
    return (
        f"<!-- figure {figure.name} -->\n"
        f"Printed by `{figure.command}` at commit {stamp} (`make docs-figures`):\n\n"
        f"```\n{text}```\n<!-- /figure -->"
    )


def documented(doc: Path) -> dict[str, str]:
    """Figure name -> the text inside its code fence, as the document has it now."""
    out = {}
    for m in BLOCK.finditer(doc.read_text()):
        fence = FENCE.search(m.group("body"))
        out[m.group("name")] = fence.group("text") if fence else ""
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, rewrite nothing; exit 1 on a difference")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="only this figure (repeatable)")
    args = parser.parse_args(argv)
    known = {f.name: f for f in FIGURES}
    unknown = [n for n in args.only if n not in known]
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; the figures are {sorted(known)}")
    wanted = [known[n] for n in args.only] if args.only else FIGURES
    cache: dict[tuple[str, ...], str] = {}
    stamp = commit()
    problems = []
    for doc in DOCUMENTS:
        have = documented(doc)
        for name in have:
            if name not in known:
                problems.append(f"{doc.name}: figure {name!r} is not one this script makes")
        figures = [f for f in wanted if f.name in have]
        if not figures:
            continue
        fresh_by_name = {f.name: output_of(f, cache) for f in figures}
        text = doc.read_text()  # read after the runs (minutes): edits made meanwhile are kept
        for figure in figures:
            fresh = fresh_by_name[figure.name]
            if args.check:
                if have[figure.name] != fresh:
                    problems.append(f"{doc.name}: figure {figure.name!r} differs from what `{figure.command}` prints")
                continue
            text = BLOCK.sub(
                lambda m, f=figure, t=fresh: block(f, t, stamp) if m.group("name") == f.name else m.group(0), text
            )
        if not args.check:
            doc.write_text(text)
            print(f"{doc.relative_to(REPO)}: {', '.join(f.name for f in figures)}")
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
