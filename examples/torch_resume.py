"""PyTorch training that stops mid-epoch and resumes with another number of workers.

Plain PyTorch code (a map-style ``Dataset``, a small MLP, SGD) with one changed
line: ``from chute.torch import DataLoader``.  It trains two epochs without a
break and records every batch; then trains again from scratch with
``num_workers=2``, saves the loader's ``state_dict()`` with the model and the
optimizer (``torch.save``) in the middle of the first epoch, and resumes in a
new loader with ``num_workers=1``.  The resumed run sees exactly the batches the
uninterrupted run saw, in the same order, and ends with the same weights.

Run:  pip install -e '.[torch]' && python examples/torch_resume.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise SystemExit("this example trains a PyTorch model: pip install -e '.[torch]'") from exc

from chute.torch import DataLoader  # was: from torch.utils.data import DataLoader

FEATURES, CLASSES, SAMPLES = 16, 4, 4096
BATCH, EPOCHS, STOP_AT = 64, 2, 25  # the first run stops after 25 of epoch 0's 64 batches


class Blobs(torch.utils.data.Dataset):
    """``SAMPLES`` points around ``CLASSES`` centres: ``(features, label)`` pairs."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        centres = torch.randn(CLASSES, FEATURES, generator=g) * 0.5
        self.labels = torch.randint(0, CLASSES, (SAMPLES,), generator=g)
        self.points = centres[self.labels] + torch.randn(SAMPLES, FEATURES, generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.points[i], self.labels[i]


def make_loader(num_workers: int) -> DataLoader:
    return DataLoader(
        Blobs(),
        batch_size=BATCH,
        shuffle=True,  # chute's global shuffle, seeded from the generator
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(42),
    )


def make_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: list) -> float:
    x, y = batch
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def uninterrupted() -> tuple[list[list[torch.Tensor]], nn.Module]:
    model, optimizer = make_model()
    loader = make_loader(num_workers=2)
    seen = []
    for epoch in range(EPOCHS):
        for batch in loader:
            seen.append(batch)
            loss = train_step(model, optimizer, batch)
        print(f"uninterrupted: epoch {epoch} done, {len(loader)} batches, loss {loss:.4f}")
    return seen, model


def interrupted_then_resumed(checkpoint: Path) -> tuple[list[list[torch.Tensor]], nn.Module]:
    model, optimizer = make_model()
    loader = make_loader(num_workers=2)
    seen = []
    for step, batch in enumerate(loader):
        seen.append(batch)
        train_step(model, optimizer, batch)
        if step + 1 == STOP_AT:
            torch.save(
                {
                    "loader": loader.state_dict(),  # the state after the batches yielded so far
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                },
                checkpoint,
            )
            print(f"saved after {STOP_AT} batches of epoch 0 (num_workers=2)")
            break  # the job "dies" here

    # A new job: new objects, another number of workers, everything from the checkpoint.
    saved = torch.load(checkpoint)
    model, optimizer = make_model()
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    loader = make_loader(num_workers=1)
    loader.load_state_dict(saved["loader"])  # before iter(), as with StatefulDataLoader
    resumed = 0
    for _ in range(EPOCHS):  # the first iter() finishes epoch 0, the second runs epoch 1
        for batch in loader:
            seen.append(batch)
            train_step(model, optimizer, batch)
            resumed += 1
    print(f"resumed with num_workers=1: {resumed} more batches")
    return seen, model


def same_batches(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        all(torch.equal(u, v) for u, v in zip(x, y, strict=True)) for x, y in zip(a, b)
    )


def main() -> None:
    expected, model = uninterrupted()
    with tempfile.TemporaryDirectory() as tmp:
        got, resumed_model = interrupted_then_resumed(Path(tmp) / "checkpoint.pt")
    batches = same_batches(expected, got)
    weights = all(
        torch.equal(p, q)
        for p, q in zip(model.state_dict().values(), resumed_model.state_dict().values())
    )
    print(f"resumed run saw the same {len(got)} batches in the same order: {batches}")
    print(f"resumed run ends with the same weights: {weights}")
    assert batches and weights


if __name__ == "__main__":
    main()
