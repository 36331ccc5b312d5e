"""The table core: :class:`Table` (display, numbers, per-seed values, notes), seed statistics
and :func:`cell_table`, which every accuracy table of the analysis is built on.

Every accuracy cell is mean ± sample SD (ddof=1) over seeds, in percent, as in the report; the
raw per-seed values travel with every table (`Table.per_seed`) because three seeds can diverge
wildly (the report's flat mod-5 4+4: 17.58, 19.53, 98.96). A cell with fewer seeds than the
grid expects shows n; cells the grid expects but nobody ran show "– (n=0/3)".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rlt.analysis import render
from rlt.analysis.collect import Collection

Lengths = int | Mapping[str, int] | None


@dataclass
class Table:
    """One table: formatted for reading (`display`) and numeric for checking (`data`).

    data columns for accuracy tables: row (display row), key (collection row), column, mean,
    sd, n, n_expected, min, max, seeds, values (percent); other tables carry their own columns.
    """

    name: str
    title: str
    display: pd.DataFrame
    data: pd.DataFrame
    index_header: str = "task"
    per_seed: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    def cell(self, row: str, column: str) -> pd.Series:
        """The numeric record of one cell (row as displayed), for tests and scripts."""
        hit = self.data[(self.data["row"] == row) & (self.data["column"] == column)]
        if hit.empty:
            raise KeyError(f"{self.name}: no cell ({row!r}, {column!r})")
        return hit.iloc[0]

    def markdown(self, *, per_seed: bool = False, level: int = 3) -> str:
        parts = [f"{'#' * level} {self.title}", ""]
        if self.display.empty:
            parts.append("(no data)")
        else:
            parts.append(render.markdown(self.display, self.index_header))
        if self.notes:
            parts += [""] + [f"- {n}" for n in self.notes]
        if per_seed and self.per_seed is not None and not self.per_seed.empty:
            parts += ["", f"Per-seed values (%), {self.title.split(':')[0]}:", ""]
            parts.append(render.markdown(self.per_seed, "cell"))
        return "\n".join(parts) + "\n"

    def latex(self) -> str:
        return render.latex(
            self.display, caption=self.title, label=self.name, index_header=self.index_header
        )

    def write(self, out_dir: str | Path) -> list[Path]:
        """CSV of the numbers, LaTeX of the display, CSV of the per-seed values."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / f"{self.name}.csv", out / f"{self.name}.tex"]
        data = self.data.copy()
        for col in ("seeds", "values"):
            if col in data:
                data[col] = [" ".join(map(_num, v)) for v in data[col]]
        data.to_csv(paths[0], index=False)
        paths[1].write_text(self.latex())
        if self.per_seed is not None and not self.per_seed.empty:
            paths.append(out / f"{self.name}_per_seed.csv")
            self.per_seed.to_csv(paths[-1])
        return paths


def _num(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def seed_stats(values: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """mean, sample SD (ddof=1; NaN for one seed), n, min, max, seeds and values per group."""
    cols = [*by, "mean", "sd", "n", "min", "max", "seeds", "values"]
    if values.empty:
        return pd.DataFrame(columns=cols)
    values = values.sort_values("seed")
    g = values.groupby(list(by), dropna=False, sort=False)
    out = g["value"].agg(["mean", "count", "min", "max"]).rename(columns={"count": "n"})
    out["sd"] = g["value"].std(ddof=1)
    out["seeds"] = g["seed"].agg(tuple)
    out["values"] = g["value"].agg(tuple)
    return out.reset_index()[cols]


# The data columns of an accuracy table, one record per cell.
_CELL_COLUMNS = ["row", "key", "column", "mean", "sd", "n", "n_expected"]
_CELL_COLUMNS += ["min", "max", "seeds", "values"]


def cell_table(
    values: pd.DataFrame,
    *,
    c: Collection,
    name: str,
    title: str,
    rows: Sequence[str],
    columns: Sequence[str],
    row_display: Mapping[str, str] | None = None,
    row_of: Mapping[str, str] | None = None,
    best: bool = False,
    notes: list[str] | None = None,
    expected: Mapping[tuple[str, str], int] | None = None,
) -> Table:
    """Aggregate `values` (row, column, seed, value in %) into a rows x columns accuracy table.

    `rows` are the keys of `values["row"]`; `row_of` maps a key to its collection row where
    they differ (one task per length), so the grid's expected seed count still applies. A cell
    appears when it has values or the grid expects it; everything else stays blank.
    `expected` gives the expected seed count per (row key, column) where the table's rows and
    columns are not (task row, model label), e.g. the schedule view's models x quantities.
    """
    row_display = dict(row_display or {})
    row_of = dict(row_of or {})
    if expected is None:
        by_grid = c.expected_n()
        expected = {
            (r, col): by_grid.get((row_of.get(r, r), col), 0) for r in rows for col in columns
        }
    stats = seed_stats(values, ["row", "column"]).set_index(["row", "column"])
    records = []
    for r in rows:
        for col in columns:
            n_exp = expected.get((r, col), 0)
            rec = _cell_record(stats, (r, col), n_exp)
            if rec is None:
                continue
            rec.update(
                row=row_display.get(r, r), key=row_of.get(r, r), column=col, n_expected=n_exp
            )
            rec["n"] = int(rec["n"])
            records.append(rec)
    data = pd.DataFrame.from_records(records, columns=_CELL_COLUMNS)
    shown_rows = list(dict.fromkeys(data["row"]))
    shown_cols = [col for col in columns if col in set(data["column"])]
    display = pd.DataFrame("", index=pd.Index(shown_rows), columns=shown_cols, dtype=object)
    for rec in data.itertuples():
        display.loc[rec.row, rec.column] = render.fmt_cell(
            rec.mean, rec.sd, rec.n, rec.n_expected, rec.max if best else None
        )
    notes = list(notes or [])
    short = data[data["n"] < data["n_expected"]]
    if len(short):
        notes.append(
            f"{len(short)} cell(s) have fewer seeds than the grid expects, shown as (n=have/expected);"
            " see the incomplete section"
        )
    return Table(name, title, display, data, per_seed=_per_seed(data), notes=notes)


def _per_seed(data: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for rec in data.itertuples():
        if rec.n == 0:
            continue
        row = {"cell": f"{rec.row} · {rec.column}"}
        row.update({f"seed {s}": round(v, 2) for s, v in zip(rec.seeds, rec.values)})
        row.update(mean=round(rec.mean, 2), sd=round(rec.sd, 2), n=rec.n)
        rows.append(row)
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows).set_index("cell")
    seed_cols = sorted((c for c in df.columns if c.startswith("seed ")), key=lambda s: int(s[5:]))
    return df[seed_cols + ["mean", "sd", "n"]]


def _or_dash(x: object) -> str:
    return render.DASH if x is None else str(x)


_EMPTY_CELL = {
    "mean": float("nan"),
    "sd": float("nan"),
    "n": 0,
    "min": float("nan"),
    "max": float("nan"),
    "seeds": (),
    "values": (),
}


def _cell_record(stats: pd.DataFrame, key: tuple, n_expected: int) -> dict | None:
    """Seed statistics of one table cell; an empty record when the grid expects runs there but
    none finished; None when the cell is not part of the grid at all."""
    if key in stats.index:
        s = stats.loc[key]
        return {k: s[k] for k in _EMPTY_CELL}
    if n_expected:
        return dict(_EMPTY_CELL)
    return None


def _pick_length(
    available: Sequence[int],
    task: str,
    row: str,
    lengths: Lengths,
    default: Mapping[str, int] | None = None,
) -> int | None:
    if isinstance(lengths, Mapping):
        want = lengths.get(row, lengths.get(task))
    else:
        want = lengths
    if want is None and default and default.get(task) in available:
        want = default[task]
    if want is None:
        return max(available) if len(available) else None
    return int(want)
