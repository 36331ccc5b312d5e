"""Train one configuration, or a grid with -m. See README.md; the logic lives in rlt.training.

python train.py                                   # the default quickstart experiment
python train.py task=parity model=rlt1 split=5+3 seed=42
python train.py -m task=parity,s5_swaps split=4+4,5+3 seed=42,43,44
python train.py -m sweep=main                     # the report's depth-8 grid
"""

import hydra
from omegaconf import DictConfig

from rlt.training import hydra_support  # noqa: F401  (registers config resolvers)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from rlt.training.run import run

    multirun = hydra_support.is_multirun()
    outcome = run(cfg, raise_on_failure=not multirun)
    if multirun:
        hydra_support.report_job(cfg, outcome)


if __name__ == "__main__":
    main()
