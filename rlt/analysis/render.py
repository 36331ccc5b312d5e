"""Formatting of table cells and whole tables as Markdown and LaTeX.

Written by hand rather than through DataFrame.to_markdown/Styler.to_latex so that analysis
needs nothing beyond pandas (those need tabulate and jinja2) and the output is stable.
"""

from __future__ import annotations

import math
import re

import pandas as pd

DASH = "–"


def fmt_cell(mean: float, sd: float, n: int, n_expected: int = 0, best: float | None = None) -> str:
    """A table cell: "mean ± sd" in percent with 2 decimals, the report's style.

    A cell built from fewer seeds than the grid expects says so ("(n=2/3)"); a single seed has
    no SD and shows its value; `best` adds the maximum over seeds ("[max 98.96]").
    """
    if n == 0 or mean is None or (isinstance(mean, float) and math.isnan(mean)):
        text = DASH
    elif n == 1 or sd is None or (isinstance(sd, float) and math.isnan(sd)):
        text = f"{mean:.2f}"
    else:
        text = f"{mean:.2f} ± {sd:.2f}"
    if n_expected and n < n_expected:
        text += f" (n={n}/{n_expected})"
    if best is not None and n > 1 and not (isinstance(best, float) and math.isnan(best)):
        text += f" [max {best:.2f}]"
    return text


def markdown(df: pd.DataFrame, index_header: str | None = None) -> str:
    """A GitHub Markdown table; the index becomes the first column.

    Floats print with 2 decimals; columns of numbers are right-aligned, text left-aligned.
    """
    header = [index_header or (df.index.name or "")] + [str(c) for c in df.columns]
    # astype(object) keeps each column's own type per cell (iterrows would turn ints to floats).
    body = [[str(idx)] + [_text(v) for v in row] for idx, *row in df.astype(object).itertuples()]
    align = ["---"] + [
        "---:" if all(_NUMERIC.match(r[j]) or not r[j] for r in body) else "---"
        for j in range(1, len(header))
    ]
    lines = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_md(c) for c in cells) + " |" for cells in body]
    return "\n".join(lines)


_NUMERIC = re.compile(r"^[-+–]?\d|^–")


def _text(v: object) -> str:
    if _blank(v):
        return ""
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _blank(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
_LATEX_UNICODE = {
    "±": r"$\pm$",
    "–": "--",
    "→": r"$\to$",
    "·": r"$\cdot$",
    "×": r"$\times$",
    "Δ": r"$\Delta$",
    "≥": r"$\geq$",
}
_LATEX_RE = re.compile("|".join(re.escape(k) for k in _LATEX_ESCAPES))


def latex_escape(text: object) -> str:
    out = _LATEX_RE.sub(lambda m: _LATEX_ESCAPES[m.group(0)], str(text))
    for k, v in _LATEX_UNICODE.items():
        out = out.replace(k, v)
    return out


def latex(df: pd.DataFrame, *, caption: str, label: str, index_header: str | None = None) -> str:
    """A booktabs table environment (needs \\usepackage{booktabs})."""
    header = [index_header or (df.index.name or "")] + [str(c) for c in df.columns]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\label{{tab:{label}}}",
        r"\begin{tabular}{l" + "r" * len(df.columns) + "}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in header) + r" \\",
        r"\midrule",
    ]
    for idx, *row in df.astype(object).itertuples():
        cells = [idx] + [_text(v) for v in row]
        lines.append(" & ".join(latex_escape(c) for c in cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
