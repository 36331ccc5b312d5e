"""The state's share of the decoder input at initialisation (issue 12's lead), one batch of
parity validation examples: python docs/results/laptop/init_share.py"""

import torch

from rlt.models import RLTConfig, build_model
from rlt.tasks import get_task
from rlt.tasks.data import TaskDataModule
from rlt.training.callbacks import FeedbackDiagnostics

torch.set_num_threads(1)
task = get_task("parity", data_seed=1234, n_val=64, n_test=8)
dm = TaskDataModule(task=task, micro_batch_size=64, global_batch_size=64, max_steps=1)
tokens = next(iter(dm.val_dataloader()))["tokens"][:64]
for d, split in [(64, "1+1"), (64, "2+2"), (512, "4+4")]:
    for alpha in (0.1, 0.3, 1.0):
        torch.manual_seed(42)
        m = build_model(RLTConfig.from_split(split, d_model=d, n_heads=4, alpha=alpha))
        diag = FeedbackDiagnostics("/tmp", lambda: tokens, 1)
        r = diag.state_share(m)
        print(
            f"d={d} split={split} alpha={alpha}: state share {r['state_share']:.4f}, gate {r['gate']:.3f}"
        )
