"""Parity: is the number of ones among n uniform bits odd?

Worked example, length 5 (``supervision="final"``, the default)::

    bits 1 0 1 1 0  ->  three ones  ->  parity 1
    tokens  <bos> 1 0 1 1 0 1        prompt: <bos> and the 5 bits; response: the answer 1
    labels    .   . . . . 1 .        the last bit's label is the answer (= the next token)

With ``supervision="prefix"`` every bit is labelled with the parity of the bits so far::

    labels    .   1 1 0 1 1 .

The answer token is part of the sequence so that every task is "prompt + response" and greedy
generation from the prompt works everywhere; it is never itself supervised. No '=' marker:
the label of the last input symbol already is the answer, and the parity of a prefix is
defined at every position, so the model needs no signal that the input ended.

Leakage: training draws 1,024,000 examples, about 27,000 per length, so every string of up to
13 bits (and some up to 19) occurs in the training stream; with data seed 1234 about a third
of the in-distribution validation set does (measured over the whole stream). That cannot be
avoided for short strings (there are 8 of length 3), is what an in-distribution set measures,
and only affects checkpoint selection. From ~25 bits a repeat is practically impossible
(tested on a stream prefix); test lengths above 40 cannot occur in training at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlt.tasks import vocab
from rlt.tasks.base import IGNORE, FinalOrPrefixSupervision, Rendered, register


@register
class ParityTask(FinalOrPrefixSupervision):
    name = "parity"
    default_train_lengths = (3, 40)
    default_test_lengths = (20, 40, 48, 64, 96, 128, 192, 256)
    chance = 0.5

    def sample(self, rng: np.random.Generator, length: int) -> np.ndarray:
        return rng.integers(0, 2, size=length, dtype=np.int64)

    def render(self, instance: Any) -> Rendered:
        bits = np.asarray(instance, dtype=np.int64)
        n = len(bits)
        running = np.cumsum(bits) % 2
        d0 = vocab.DIGIT_IDS[0]
        tokens = [vocab.BOS, *(bits + d0).tolist(), d0 + int(running[-1])]
        labels = [IGNORE] * (n + 2)
        if self.supervision == "prefix":
            labels[1 : n + 1] = (running + d0).tolist()
        else:
            labels[n] = d0 + int(running[-1])
        return Rendered(tokens, labels, n + 1, n)
