"""Batching, the indexed training stream, resuming under Lightning, and generation speed."""

from __future__ import annotations

import time
import warnings

import lightning as L
import pytest
import torch
from torch import nn

from rlt.tasks import IGNORE, TaskDataModule, get_task, vocab
from rlt.tasks.data import collate


def test_collate_pads_and_keeps_every_field():
    task = get_task("addition")
    exs = [task.make_example((5, 5)), task.make_example((12345, 678))]
    b = collate(exs)
    assert set(b) == {"tokens", "labels", "score", "prompt_len", "length", "index"}
    assert b["tokens"].shape == b["labels"].shape == b["score"].shape == (2, len(exs[1].tokens))
    assert b["tokens"].dtype == b["labels"].dtype == torch.long and b["score"].dtype == torch.bool
    n = len(exs[0].tokens)
    assert b["tokens"][0, :n].tolist() == exs[0].tokens
    assert (b["tokens"][0, n:] == vocab.PAD).all() and (b["labels"][0, n:] == IGNORE).all()
    assert not b["score"][0, n:].any()
    assert b["prompt_len"].tolist() == [5, 11] and b["length"].tolist() == [1, 5]


def test_train_loader_serves_the_stream_in_order():
    dm = TaskDataModule("parity", micro_batch_size=4, global_batch_size=8, max_steps=3)
    assert dm.accumulate_grad_batches == 2 and dm.num_train_examples == 24
    loader = dm.train_dataloader()
    assert len(loader) == 6
    batches = list(loader)
    assert [b["index"].tolist() for b in batches] == [
        list(range(4 * k, 4 * k + 4)) for k in range(6)
    ]
    assert batches[2]["tokens"][1, : len(dm.task.example("train", 9).tokens)].tolist() == (
        dm.task.example("train", 9).tokens
    )


def test_resume_step_and_start_index_shift_the_stream():
    dm = TaskDataModule("s5", micro_batch_size=2, global_batch_size=4, max_steps=5, start_index=100)
    full = [b["index"].tolist() for b in dm.train_dataloader(resume_step=0)]
    assert full[0] == [100, 101] and full[-1] == [118, 119]
    resumed = dm.train_dataloader(resume_step=3)
    assert len(resumed) == len(full)  # Lightning's restored batch counter expects the full length
    assert [b["index"].tolist() for b in resumed] == full[6:]


def test_num_workers_do_not_change_the_stream():
    kw = {"micro_batch_size": 4, "global_batch_size": 8, "max_steps": 2}
    a = [b["tokens"] for b in TaskDataModule("mod5_brackets", **kw).train_dataloader()]
    b = [
        b["tokens"] for b in TaskDataModule("mod5_brackets", num_workers=2, **kw).train_dataloader()
    ]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_val_and_test_loaders():
    dm = TaskDataModule(
        "mod5_flat", eval_batch_size=100, n_val=250, n_test=30, test_lengths=[7, 63]
    )
    val = list(dm.val_dataloader())
    assert [len(b["index"]) for b in val] == [100, 100, 50]
    lengths = torch.cat([b["length"] for b in val]).tolist()
    assert lengths == sorted(lengths)  # grouped by length, so little padding
    loaders = dm.test_dataloaders()
    assert list(loaders) == [7, 63] and dm.test_lengths == (7, 63)
    for n, loader in loaders.items():
        (batch,) = list(loader)
        assert batch["length"].tolist() == [n] * 30 and batch["index"].tolist() == list(range(30))
    assert len(dm.test_dataloader()) == 2
    assert list(dm.test_dataloaders([255])) == [255]


def test_datamodule_option_errors():
    with pytest.raises(ValueError, match="'global_batch_size'"):
        TaskDataModule("parity", micro_batch_size=3, global_batch_size=8)
    with pytest.raises(ValueError, match="'supervison'"):
        TaskDataModule("parity", supervison="prefix")
    with pytest.raises(ValueError, match="already built"):
        TaskDataModule(get_task("parity"), supervision="prefix")
    assert TaskDataModule(get_task("parity", supervision="prefix")).task.supervision == "prefix"


def test_stream_state_guards_resume_into_another_stream():
    loader = TaskDataModule("parity", micro_batch_size=4, global_batch_size=8).train_dataloader()
    state = loader.state_dict()
    loader.load_state_dict(state)  # same stream: fine
    other = TaskDataModule("parity", micro_batch_size=4, global_batch_size=8, data_seed=9)
    with pytest.raises(ValueError, match="data_seed: checkpoint 1234, now 9"):
        other.train_dataloader().load_state_dict(state)


class _Recorder(L.LightningModule):
    """Records which stream indices each training step sees; learns nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.seen: list[list[int]] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["index"].tolist())
        return self.w * batch["tokens"].float().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _fit(tmp_path, ckpt_path=None, callbacks=(), **trainer_kwargs):
    dm = TaskDataModule("parity", micro_batch_size=2, global_batch_size=4, max_steps=6)
    module = _Recorder()
    trainer = L.Trainer(
        max_steps=trainer_kwargs.pop("max_steps", 6),
        accumulate_grad_batches=dm.accumulate_grad_batches,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=list(callbacks),
        limit_val_batches=0,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        **trainer_kwargs,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    assert not [w for w in caught if "not resumable" in str(w.message)]
    return module.seen


def test_lightning_resume_continues_the_stream_exactly(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1)
    straight = _fit(tmp_path, callbacks=[ckpt])
    assert straight == [[2 * k, 2 * k + 1] for k in range(12)]
    (step3,) = (tmp_path / "ckpt").glob("*step=3.ckpt")
    resumed = _fit(tmp_path, ckpt_path=str(step3))
    assert resumed == straight[6:]


def test_trainer_steps_must_fit_in_the_stream(tmp_path):
    assert _fit(tmp_path, fast_dev_run=True) == [[0, 1]]  # fewer steps than the stream: fine
    with pytest.raises(ValueError, match="trainer.max_steps=7"):
        _fit(tmp_path, max_steps=7)  # would run past the end of the stream


def test_test_set_at_length_512_is_fast():
    """Acceptance 6: 1,024 examples at length 512 take well under a few seconds."""
    for name in ("s5", "s5_swaps"):
        t0 = time.perf_counter()
        batch = collate(get_task(name).test_set(512))
        elapsed = time.perf_counter() - t0
        assert batch["tokens"].shape == (1024, 514)
        print(f"{name}: 1,024 examples at length 512 generated and collated in {elapsed:.2f} s")
        assert elapsed < 10.0  # typically ~0.5 s; generous to stay robust on loaded machines
