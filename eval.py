"""Score a finished run's kept checkpoint at any test lengths, after training.

    python eval.py RUN_DIR                                   # the run's own test lengths
    python eval.py RUN_DIR task.test_lengths=[20,512,1024]   # others
    python eval.py RUN_DIR --policy final task.test_lengths=[512]

Writes ``RUN_DIR/eval_<policy>.json``: the rows of results.json's ``test`` block at the asked
lengths, with the config hash and the checkpoint (step, sha256) they were scored from, so the
analysis uses them only while they describe the run results.json describes. A later call adds
its lengths to the file's (a length scored again is replaced). results.json, config.yaml and
the run's identity stay untouched; ``analysis/tables.py`` shows these lengths as their own rows.
Overrides are dotted ``key=value`` strings applied to the run's stored config for this scoring
only (``task.test_lengths``, ``scale.n_test``, ``scale.eval_batch``).

State interventions (rlt/models/intervene.py) score the run through its streaming path with a
part of the state put back to its initial value at chosen positions:

    python eval.py RUN_DIR state.drop=feedback state.at=8          # s_t back to s* before 8
    python eval.py RUN_DIR state.drop=window,memory state.at=every:16
    python eval.py RUN_DIR state.drop=all state.at=boundary        # at the prompt's end
    python eval.py RUN_DIR state.drop=none                         # streamed, nothing dropped

They write ``RUN_DIR/state_<policy>_drop-<parts>_at-<where>.json`` (``state_<policy>_drop-none
.json``), one file per intervention, never read by the run's own tables: the rows at each length
and ``by_position``, the accuracy at every scored input position and whether anything was
dropped at that length (``dropped``: a position past a length's sequences cuts none of them,
said on screen too; a position no test sequence reaches is refused). Only a finished run
(status done) is scored, and it is locked while it is: no training can start meanwhile. One
thread unless ``--threads`` says otherwise (a shared machine stays usable).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

ALLOWED = ("task.test_lengths", "scale.n_test", "scale.eval_batch", "state.drop", "state.at")
STATE_KEYS = ("state.drop", "state.at")
# The longest sequence eval.py scores: memory grows with the length (the encoder's memory and
# the Transformer's attention), and a typo (1000000000) must fail at once, not in the allocator.
MAX_LENGTH = 16384


class Refused(Exception):
    """A one-line reason eval.py will not score (exit status 2)."""


def asked_lengths(overrides: list[str]) -> list[int] | None:
    """The lengths ``task.test_lengths=...`` asks for (None when not given), checked."""
    given = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == "task.test_lengths"]
    if not given:
        return None
    try:
        value = yaml.safe_load(given[-1])
    except yaml.YAMLError:
        value = given[-1]
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise Refused(
            f"task.test_lengths={given[-1]}: give a non-empty list of lengths, e.g. "
            "task.test_lengths=[20,512] (or leave it out for the run's own test lengths)"
        )
    bad = [x for x in value if not isinstance(x, int) or isinstance(x, bool) or x < 1]
    if bad:
        raise Refused(f"task.test_lengths: {bad} are not positive whole lengths")
    too_long = [x for x in value if x > MAX_LENGTH]
    if too_long:
        raise Refused(
            f"task.test_lengths: {too_long} exceed eval.py's {MAX_LENGTH} tokens per sequence "
            "(memory grows with the length); score shorter lengths"
        )
    return sorted(set(value))


def dropped_at(how, dm, lengths: list[int]) -> dict[int, bool]:
    """Per test length, whether ``how`` cuts any of its sequences; refuses a position (or
    period) that no test sequence reaches, whose file would be the streamed control's under an
    intervention's name, and says which lengths it leaves uncut."""
    tokens = {n: max(len(e.tokens) for e in dm.test_examples(n)) for n in lengths}
    dropped = {n: how.drops_in(tokens[n]) for n in lengths}
    missed = [n for n in lengths if not dropped[n]]
    if how.where == "never" or not missed:
        return dropped
    top = max(lengths, key=lambda n: (tokens[n], n))
    if len(missed) == len(lengths):
        raise Refused(
            f"state.at={how.at}: no test sequence reaches position {how.k} (the longest, at "
            f"test length {top}, has {tokens[top]} tokens: positions 0-{tokens[top] - 1}), so "
            f"nothing would be dropped; give state.at below {tokens[top]}, longer "
            "task.test_lengths, or state.drop=none for the streamed control"
        )
    print(
        f"note: state.at={how.at}: nothing is dropped at test length"
        f"{'s' if len(missed) > 1 else ''} {', '.join(map(str, missed))} (their sequences end "
        f"before position {how.k}): those rows are the streamed control's",
        flush=True,
    )
    return dropped


def merged(path: Path, stamp: dict, rows: list[dict], key: str = "rows") -> list[dict]:
    """The new rows plus those an earlier call wrote of the same checkpoint at other lengths
    (``key``: the file's list of per-length entries)."""
    from rlt import rundir

    earlier = rundir.read_json(path, corrupt_ok=True) or {}
    earlier.setdefault("portable", False)  # written before the record: portable was off then
    # written before its settings were recorded: portable meant MKL_CBWR=AVX2 then, and off
    # settings are not known (rlt/portable/): such a file starts anew
    from rlt import portable

    earlier.setdefault("arithmetic", portable.EARLIER if earlier["portable"] is True else None)
    if any(earlier.get(k) != v for k, v in stamp.items()):
        return rows  # another checkpoint or config: start the file anew
    new = {r["length"] for r in rows}
    kept = [r for r in earlier.get(key) or [] if isinstance(r, dict) and r.get("length") not in new]
    return sorted(kept + rows, key=lambda r: (r["length"], r.get("metric", "")))


def score(run_dir: Path, policy: str, overrides: list[str]) -> int:
    from rlt import rundir
    from rlt.training.evaluate import evaluate_intervened, evaluate_lengths
    from rlt.training.kept import load_kept

    asked = dict(o.split("=", 1) for o in overrides if o.split("=", 1)[0] in STATE_KEYS)
    overrides = [o for o in overrides if o.split("=", 1)[0] not in STATE_KEYS]
    lengths = asked_lengths(overrides)
    if lengths is not None:  # every asked length, not the preset's spread of them
        overrides = [*overrides, "scale.test_lengths_limit=null"]
    if "state.at" in asked and "state.drop" not in asked:
        raise Refused("state.at needs state.drop=<part>[,<part>...] (or all)")
    if "state.at" in asked and asked["state.drop"].strip().lower() == "none":
        raise Refused(
            "state.at: state.drop=none drops nothing anywhere (the streamed control); leave "
            "state.at out, or name the part to drop"
        )
    kept = load_kept(run_dir, policy, overrides)
    how = None
    if "state.drop" in asked:
        from rlt.models import intervene

        try:
            how = intervene.parse(
                kept.model, asked["state.drop"], asked.get("state.at", "boundary")
            )
        except intervene.InterventionError as e:
            raise Refused(str(e)) from e
    spec = kept.spec
    dm = spec.datamodule()
    dropped = None if how is None else dropped_at(how, dm, spec.test_lengths)
    with_exact = "exact" in getattr(spec.task, "metrics", ())
    start = time.perf_counter()

    def progress(length: int, metrics: dict) -> None:
        print(
            f"{length:>6}  acc {100 * metrics['acc']:6.2f}%   "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )

    what = "" if how is None else f", {how.name}"
    print(
        f"scoring {run_dir} ({policy}, step {kept.step}{what}) at {spec.test_lengths}", flush=True
    )
    loaders = dm.test_dataloaders(spec.test_lengths)
    kwargs = {"with_exact": with_exact, "acc_mode": spec.task.acc_mode, "progress": progress}
    stamp = rundir.scored_stamp(run_dir, policy, kept.step)
    extra: dict = {}
    if how is None:
        rows = evaluate_lengths(kept.model, loaders, **kwargs)
        out = rundir.eval_path(run_dir, policy)
    else:
        positions: list[dict] = []
        rows = evaluate_intervened(kept.model, loaders, how, by_position=positions, **kwargs)
        positions = [{**block, "dropped": dropped[block["length"]]} for block in positions]
        out = run_dir / f"state_{policy}_{how.name}.json"
        stamp |= {"intervention": {"drop": list(how.parts), "at": how.at}}
        extra = {"by_position": merged(out, stamp, positions, "by_position")}
    rundir.atomic_write_json(out, {**stamp, "rows": merged(out, stamp, rows), **extra})
    print(f"wrote {out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python eval.py", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "overrides",
        nargs="*",
        help=f"key=value of {', '.join(ALLOWED)}; e.g. task.test_lengths=[20,512]",
    )
    parser.add_argument(
        "--policy",
        default="min_val_loss",
        help="checkpoint policy to score: min_val_loss (default), max_val_acc or final",
    )
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    given = sys.argv[1:] if argv is None else argv
    if not [x for x in given if not x.startswith("-")] and not {"-h", "--help"} & set(given):
        parser.error("give the run directory to score, e.g. python eval.py runs/.../seed42")
    a = parser.parse_intermixed_args(argv)  # options between the overrides, as the doc shows
    bad = [o for o in a.overrides if o.split("=", 1)[0] not in ALLOWED or "=" not in o]
    if bad:
        print(f"error: {bad}: eval.py takes {', '.join(ALLOWED)} (key=value)", file=sys.stderr)
        return 2
    if a.threads < 1:
        print(f"error: --threads {a.threads}: give 1 or more", file=sys.stderr)
        return 2
    import torch

    from rlt import rundir
    from rlt.training.spec import ConfigError

    torch.set_num_threads(a.threads)
    if not a.run_dir.is_dir():
        print(
            f"error: {a.run_dir} is not a directory: give a run directory train.py wrote",
            file=sys.stderr,
        )
        return 2
    try:
        with rundir.run_lock(a.run_dir) as got:
            if not got:
                raise Refused(f"{a.run_dir} is being trained by another process; score it later")
            return score(a.run_dir, a.policy, a.overrides)
    except (Refused, FileNotFoundError, PermissionError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
