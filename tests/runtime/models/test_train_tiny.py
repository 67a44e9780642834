"""scripts/train_tiny.py is deterministic from its seed (two one-step runs give identical weights)."""
import argparse

import pytest
import torch

from scripts import train_tiny

pytest.importorskip("transformers")


def _weights(seed: int) -> dict[str, torch.Tensor]:
    args = argparse.Namespace(steps=1, batch=2, lr=3e-3, warmup=60, seed=seed)
    return train_tiny.train(args)["model"].state_dict()


@pytest.mark.slow
def test_same_seed_same_weights():
    if not all((train_tiny.stdlib_dir() / f).is_file() for f in train_tiny.CORPUS):
        pytest.skip("this Python's stdlib lacks a corpus file (the list is for CPython 3.10-3.12)")
    a, b = _weights(0), _weights(0)
    assert all(torch.equal(a[k], b[k]) for k in a)
