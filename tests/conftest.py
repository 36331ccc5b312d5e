"""Shared test setup: W&B never reaches a server, and Hydra resolvers are registered."""

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

import rlt.training.hydra_support  # noqa: E402,F401  (registers OmegaConf resolvers)


@pytest.fixture
def one_thread():
    """Tiny tensors gain nothing from threads, and on a busy machine 2 threads per op can be
    100x slower than 1 (spin-waiting workers). The model and benchmark tests use it for every
    test (``pytestmark`` / an autouse wrapper)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The longest test modules first: under pytest-xdist (pyproject: -n 3 --dist loadscope, a
# module stays on one worker; --no-loadscope-reorder keeps this order, where xdist would put
# the modules with most tests first) they start at once and the short ones fill the other workers,
# instead of one long module ending the run alone. The SLURM module mostly waits for SLURM's
# clock, which is why there is a third worker on two cores.
LONG_FIRST = (
    "tests/sweeps/test_slurm.py",
    "tests/sweeps/test_sweeps.py",
    "tests/test_bench.py",
    "tests/models/test_model_compiled.py",
    "tests/test_readme.py",
    "tests/test_gpu_check.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {module: i for i, module in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable
