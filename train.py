"""Train one configuration, or a grid with -m. See README.md; the logic lives in rlt.training.

python train.py                                   # the default quickstart experiment
python train.py task=parity model=rlt1 split=5+3 seed=42
python train.py -m task=parity,s5_swaps split=4+4,5+3 seed=42,43,44
python train.py -m sweep=main                     # the report's depth-8 grid

A configuration error prints one line naming the key and the fix (exit status 2); set
RLT_DEBUG=1 for the traceback. In a grid, a cell refused once it runs (an unreadable
last.ckpt) is listed as refused and the other cells go on (exit status 1). Every cell of the command is checked before Hydra creates any
directory (hydra_support.precheck), so a refused command leaves root as it was. A SIGTERM to a
grid run here (the basic launcher) stops the grid: the summary, then exit status 143.
"""

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rlt.training import hydra_support


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from rlt.training.checkpoints import WriteError
    from rlt.training.run import SIGTERM_EXIT, run
    from rlt.training.spec import ConfigError

    multirun = hydra_support.is_multirun()
    try:
        outcome = run(cfg, raise_on_failure=not multirun)
    except ConfigError as e:
        if os.environ.get("RLT_DEBUG"):
            raise
        if multirun:  # one cell refused once the grid runs: the other cells go on
            print(f"config error: {cfg.cell}: {e}", file=sys.stderr, flush=True)
            hydra_support.report_job(cfg, {"state": "refused", "error": str(e)})
            return
        print(f"config error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except WriteError as e:  # status.json says failed, with the traceback
        if os.environ.get("RLT_DEBUG"):
            raise
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
    if multirun:
        hydra_support.report_job(cfg, outcome)
        if hydra_support.stops_the_grid(outcome):  # SIGTERM to a grid trained in this process
            from hydra.core.hydra_config import HydraConfig

            hydra_support.print_summary(Path(HydraConfig.get().sweep.dir))
            print("the grid was stopped (SIGTERM): its later cells were not started; the same "
                  "command resumes the stopped cell and runs the rest", flush=True)  # fmt: skip
            sys.exit(SIGTERM_EXIT)
    elif outcome.get("state") == "busy":
        sys.exit(3)  # another process trains this run: nothing was done here


if __name__ == "__main__":
    hydra_support.precheck(sys.argv[1:])
    main()
