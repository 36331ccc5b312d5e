"""The report's figures from sweep directories, as PNG and PDF.

    python analysis/figures.py runs/paper [runs/feedback ...] [--out DIR] [--policy final]

The logic lives in rlt.analysis.figures (importable and tested); this is only the entry point.
"""

from rlt.analysis.cli import figures_main

if __name__ == "__main__":
    raise SystemExit(figures_main())
