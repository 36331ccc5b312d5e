"""Rewrite the generated parts of docs/results/laptop/README.md from what
`python analysis/tables.py docs/results/laptop/runs/laptop` prints, so every number on the page
is the tables' (issue 20). Two regions, between their markers:

    <!-- verdicts:start --> ... <!-- verdicts:end -->   the verdict and beyond-the-report tables
    <!-- tables:start --> ... <!-- tables:end -->       Table 1, lengths, scaled accuracy, cost

    python docs/results/laptop/update_tables.py            # rewrite
    python docs/results/laptop/update_tables.py --check    # exit 1 if the page is out of date
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

from rlt.analysis.cli import tables_main

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs" / "laptop"
REGIONS = {
    "verdicts": ("Verdicts:", "Beyond the report:"),
    "tables": ("Table 1:", "Test acc (%) at every", "Scaled acc", "Training cost:"),
}


def sections(report: str) -> dict[str, str]:
    """The report's level-2 sections by title, demoted to level 3."""
    out = {}
    for part in re.split(r"(?m)^## ", report)[1:]:
        title = part.splitlines()[0]
        out[title] = "### " + part.rstrip() + "\n"
    return out


def rendered() -> tuple[str, str]:
    """(the page as it is, the page with its generated regions rewritten)."""
    buffer = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(buffer):
        assert tables_main([str(RUNS), "--out", tmp, "--no-per-seed"]) == 0
    found = sections(buffer.getvalue())
    page = old = (HERE / "README.md").read_text()
    for region, prefixes in REGIONS.items():
        body = "\n".join(text for title, text in found.items() if title.startswith(prefixes))
        start, end = f"<!-- {region}:start -->", f"<!-- {region}:end -->"
        pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
        assert pattern.search(page), f"README.md lacks the {region} markers"
        replacement = f"{start}\n{body}\n{end}"
        page = pattern.sub(lambda _, text=replacement: text, page)
    return old, page


def main(argv: list[str] | None = None) -> int:
    old, new = rendered()
    if argv and "--check" in argv:
        if old != new:
            print("docs/results/laptop/README.md is out of date: run update_tables.py")
            return 1
        return 0
    (HERE / "README.md").write_text(new)
    print(f"updated {HERE / 'README.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
