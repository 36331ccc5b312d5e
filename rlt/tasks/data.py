"""Datasets, batching and the LightningDataModule that serves any registered task.

The training stream is indexed, not shuffled: micro-batch k holds examples
``start_index + k*mb .. start_index + (k+1)*mb - 1``, so optimizer step s sees examples
``start_index + s*G .. start_index + (s+1)*G - 1`` (G = global batch) for every architecture
and seed. Examples are already independent random draws, so no shuffling is needed, and the
order makes resuming trivial: at step s the loader starts at micro-batch ``s * G / mb``.

Resuming under Lightning: ``train_dataloader()`` reads ``trainer.global_step`` (restored from
the checkpoint before Lightning builds the loaders) and starts there, while ``len()`` stays the
whole run's number of micro-batches, which is what Lightning's restored batch counter expects.
The loader also carries a ``state_dict`` describing the stream, so Lightning treats it as
resumable and refuses (``ValueError``) to resume into a different stream.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Sampler

from rlt.tasks.base import IGNORE, Example, Task, check_int, get_task
from rlt.tasks.vocab import PAD


def collate(examples: Sequence[Example]) -> dict[str, torch.Tensor]:
    """Pad to the longest example: tokens with PAD, labels with IGNORE, score with False.

    Returns ``tokens``, ``labels`` (B, T) long, ``score`` (B, T) bool and ``prompt_len``,
    ``length``, ``index`` (B,) long. Padding is on the right, so causal models are unaffected.
    """
    t = max(len(ex.tokens) for ex in examples)
    return {
        "tokens": torch.tensor([ex.tokens + [PAD] * (t - len(ex.tokens)) for ex in examples]),
        "labels": torch.tensor([ex.labels + [IGNORE] * (t - len(ex.labels)) for ex in examples]),
        "score": torch.tensor([ex.score + [False] * (t - len(ex.score)) for ex in examples]),
        "prompt_len": torch.tensor([ex.prompt_len for ex in examples]),
        "length": torch.tensor([ex.length for ex in examples]),
        "index": torch.tensor([ex.index for ex in examples]),
    }


class TrainStream(Dataset):
    """The training stream: item i is ``task.example("train", i)``, generated on demand."""

    def __init__(self, task: Task, size: int) -> None:
        self.task, self.size = task, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Example:
        if not 0 <= index < self.size:
            raise IndexError(f"training stream index {index} outside [0, {self.size})")
        return self.task.example("train", index)


class ExampleList(Dataset):
    """A fixed, materialized set (validation or one test length)."""

    def __init__(self, examples: list[Example]) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]


class StreamBatchSampler(Sampler[list[int]]):
    """Micro-batch k = ``first + k*batch_size ..``; iteration starts at ``resume_batch``.

    ``len()`` is always the whole run's ``num_batches``: after a resume, Lightning's batch
    counter restarts from the checkpoint, so the two end together.
    """

    def __init__(
        self, first: int, num_batches: int, batch_size: int, resume_batch: int = 0
    ) -> None:
        self.first, self.num_batches, self.batch_size = first, num_batches, batch_size
        self.resume_batch = resume_batch

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[list[int]]:
        for k in range(self.resume_batch, self.num_batches):
            start = self.first + k * self.batch_size
            yield list(range(start, start + self.batch_size))


class StreamLoader(DataLoader):
    """A DataLoader whose ``state_dict`` names the stream it serves (Lightning's _Stateful)."""

    def __init__(self, *args: Any, stream: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream = dict(stream)

    def state_dict(self) -> dict[str, Any]:
        return dict(self.stream)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        diff = {k: (state_dict.get(k), v) for k, v in self.stream.items() if state_dict.get(k) != v}
        if diff:
            detail = "; ".join(
                f"{k}: checkpoint {old!r}, now {new!r}" for k, (old, new) in diff.items()
            )
            raise ValueError(
                f"cannot resume: the checkpoint was trained on a different data stream ({detail})"
            )


class TaskDataModule(LightningDataModule):
    """Train / val / per-length test loaders for one task.

    Args:
        task: a registered task name (options as extra keywords) or a built ``Task``.
        micro_batch_size: examples per forward pass.
        global_batch_size: examples per optimizer step; a multiple of ``micro_batch_size``
            (``accumulate_grad_batches`` = global / micro).
        max_steps: optimizer steps in the run; the stream holds ``max_steps * global`` examples.
        eval_batch_size: batch size of the validation and test loaders.
        num_workers: training-loader workers (0 = in process; val/test sets are precomputed).
        start_index: stream index of step 0's first example (0 for every paper run).
        pin_memory: passed to every DataLoader (useful on GPU).
        **task_options: forwarded to ``get_task`` (data_seed, supervision, train_lengths,
            test_lengths, n_val, n_test, ...).
    """

    def __init__(
        self,
        task: str | Task,
        *,
        micro_batch_size: int = 32,
        global_batch_size: int = 512,
        max_steps: int = 2000,
        eval_batch_size: int = 256,
        num_workers: int = 0,
        start_index: int = 0,
        pin_memory: bool = False,
        **task_options: Any,
    ) -> None:
        super().__init__()
        if isinstance(task, Task):
            if task_options:
                raise ValueError(
                    f"task options {sorted(task_options)} given with an already built task {task!r}"
                )
            self.task = task
        else:
            self.task = get_task(task, **task_options)
        self.micro_batch_size = check_int(micro_batch_size, "micro_batch_size", 1)
        self.global_batch_size = check_int(global_batch_size, "global_batch_size", 1)
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"option 'global_batch_size' ({global_batch_size}) must be a multiple of "
                f"'micro_batch_size' ({micro_batch_size})"
            )
        self.max_steps = check_int(max_steps, "max_steps", 1)
        self.eval_batch_size = check_int(eval_batch_size, "eval_batch_size", 1)
        self.num_workers = check_int(num_workers, "num_workers", 0)
        self.start_index = check_int(start_index, "start_index", 0)
        self.pin_memory = bool(pin_memory)
        self._val: list[Example] | None = None
        self._test: dict[int, list[Example]] = {}

    @property
    def accumulate_grad_batches(self) -> int:
        return self.global_batch_size // self.micro_batch_size

    @property
    def num_train_examples(self) -> int:
        return self.max_steps * self.global_batch_size

    @property
    def test_lengths(self) -> tuple[int, ...]:
        """Lengths of ``test_dataloader()``'s loaders, in order (dataloader_idx -> length)."""
        return self.task.test_lengths

    def stream_state(self) -> dict[str, Any]:
        """What must not change across a resume for the stream to continue exactly."""
        return {
            "task": self.task.name,
            "data_seed": self.task.data_seed,
            "train_lengths": list(self.task.train_lengths),
            "task_options": self.task.task_options(),
            "start_index": self.start_index,
            "micro_batch_size": self.micro_batch_size,
            "global_batch_size": self.global_batch_size,
        }

    def _resume_step(self) -> int:
        """The attached trainer's restored optimizer step (0 when used outside Lightning)."""
        trainer = self.trainer
        if trainer is None:
            return 0
        if trainer.max_steps == -1 or trainer.max_steps > self.max_steps:
            raise ValueError(
                f"trainer.max_steps={trainer.max_steps} but the data module holds {self.max_steps} "
                "steps of data; set both from the same value (a smaller trainer.max_steps is fine)"
            )
        return int(trainer.global_step)

    def train_dataloader(self, resume_step: int | None = None) -> StreamLoader:
        """The training stream from ``resume_step`` (default: the trainer's global step)."""
        step = (
            self._resume_step() if resume_step is None else check_int(resume_step, "resume_step", 0)
        )
        num_batches = self.max_steps * self.accumulate_grad_batches
        sampler = StreamBatchSampler(
            self.start_index,
            num_batches,
            self.micro_batch_size,
            resume_batch=step * self.accumulate_grad_batches,
        )
        dataset = TrainStream(self.task, self.start_index + self.num_train_examples)
        return StreamLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            stream=self.stream_state(),
        )

    def val_examples(self) -> list[Example]:
        """The validation set, ordered by (length, index) so that batches need little padding."""
        if self._val is None:
            self._val = sorted(self.task.val_set(), key=lambda ex: (ex.length, ex.index))
        return self._val

    def test_examples(self, length: int) -> list[Example]:
        if length not in self._test:
            self._test[length] = self.task.test_set(length)
        return self._test[length]

    def _fixed_loader(self, examples: list[Example]) -> DataLoader:
        return DataLoader(
            ExampleList(examples),
            batch_size=self.eval_batch_size,
            shuffle=False,
            collate_fn=collate,
            pin_memory=self.pin_memory,
        )

    def val_dataloader(self) -> DataLoader:
        return self._fixed_loader(self.val_examples())

    def test_dataloaders(self, lengths: Sequence[int] | None = None) -> dict[int, DataLoader]:
        """``{length: DataLoader}`` for ``lengths`` (default: the task's test lengths)."""
        lengths = self.task.test_lengths if lengths is None else lengths
        return {n: self._fixed_loader(self.test_examples(n)) for n in lengths}

    def test_dataloader(self) -> list[DataLoader]:
        """Lightning's hook: one loader per ``self.test_lengths`` entry, in that order."""
        return list(self.test_dataloaders().values())
