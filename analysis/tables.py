"""The report's tables from sweep directories: Markdown on stdout, CSV and LaTeX in --out.

    python analysis/tables.py runs/paper [runs/feedback ...] [--step 500] [--length parity=256]
        [--policy min_val_loss|final|max_val_acc] [--split 4+4] [--compare-report] [--out DIR]

The logic lives in rlt.analysis (importable and tested); this file is only the entry point.
"""

from rlt.analysis.cli import tables_main

if __name__ == "__main__":
    raise SystemExit(tables_main())
