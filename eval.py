"""Score a finished run's kept checkpoint at any test lengths, after training.

    python eval.py RUN_DIR                                   # the run's own test lengths
    python eval.py RUN_DIR task.test_lengths=[20,512,1024]   # others
    python eval.py RUN_DIR --policy final task.test_lengths=[512]

Writes ``RUN_DIR/eval_<policy>.json`` (the rows of results.json's ``test`` block at the asked
lengths, with the checkpoint's step), leaving results.json, config.yaml and the run's identity
untouched; ``analysis/tables.py`` reads these files and adds their lengths to the run's
length tables and curves. Overrides are dotted ``key=value`` strings applied to the run's
stored config for this scoring only (``task.test_lengths``, ``scale.n_test``,
``scale.eval_batch``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ALLOWED = ("task.test_lengths", "scale.n_test", "scale.eval_batch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python eval.py", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("overrides", nargs="*", help="key=value, e.g. task.test_lengths=[20,512]")
    parser.add_argument("--policy", default="min_val_loss", help="checkpoint policy to score")
    a = parser.parse_args(argv)
    bad = [o for o in a.overrides if o.split("=", 1)[0] not in ALLOWED or "=" not in o]
    if bad:
        print(f"error: {bad}: eval.py takes {', '.join(ALLOWED)} (key=value)", file=sys.stderr)
        return 2
    from rlt.training.evaluate import evaluate_lengths
    from rlt.training.kept import load_kept
    from rlt.training.spec import ConfigError

    try:
        kept = load_kept(a.run_dir, a.policy, a.overrides)
    except (FileNotFoundError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from rlt.tasks.data import TaskDataModule

    spec = kept.spec
    dm = TaskDataModule(
        task=spec.task,
        micro_batch_size=spec.cfg.scale.micro_batch,
        global_batch_size=spec.cfg.scale.global_batch,
        max_steps=spec.cfg.scale.max_steps,
        eval_batch_size=spec.cfg.scale.eval_batch,
    )
    with_exact = "exact" in getattr(spec.task, "metrics", ())
    rows = evaluate_lengths(
        kept.model,
        dm.test_dataloaders(spec.test_lengths),
        with_exact=with_exact,
        acc_mode=spec.task.acc_mode,
    )
    out = a.run_dir / f"eval_{a.policy}.json"
    out.write_text(json.dumps({"policy": a.policy, "step": kept.step, "rows": rows}, indent=2))
    for length in spec.test_lengths:
        acc = next(r["value"] for r in rows if r["length"] == length and r["metric"] == "acc")
        print(f"{length:>6}  acc {100 * acc:6.2f}%")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
