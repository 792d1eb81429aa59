"""Nightly training as a Prefect 3 flow: prepare -> train (a sweep) -> evaluate -> publish-if-better.

The heavy steps are ``@kinetic_task``s: their bodies run as detached Kinetic jobs (local
processes on the embedded default; TPU/GPU pods with a KineticConfig block or
``KINETIC_BACKEND=gke``). Retries reattach to running jobs instead of relaunching them.

Run once, on the embedded default (Prefect starts a temporary API server if none is set)::

    python dags_examples/nightly_training_prefect.py

Serve it with a daily cron schedule (02:00 UTC)::

    python dags_examples/nightly_training_prefect.py --serve
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
from pathlib import Path
from typing import Any

from kinetic_prefect import kinetic_map, kinetic_task
from prefect import flow, get_run_logger, task

BEST_MODEL = Path(
    os.environ.get("NIGHTLY_BEST_MODEL", "~/.kinetic-demo/best_model.json")
).expanduser()


@kinetic_task(retries=2, retry_delay_seconds=5, timeout_seconds=3600, life_span=3600)
def prepare(n_samples: int, seed: int) -> dict[str, Any]:
    """Synthetic regression data y = 3x - 2 + noise, split into train and validation."""
    rng = random.Random(seed)
    xs = [rng.uniform(-1, 1) for _ in range(n_samples)]
    ys = [3.0 * x - 2.0 + rng.gauss(0, 0.1) for x in xs]
    cut = int(0.8 * n_samples)
    print(f"prepared {n_samples} samples (seed {seed})")
    return {"train": (xs[:cut], ys[:cut]), "valid": (xs[cut:], ys[cut:])}


@kinetic_task(retries=2, retry_delay_seconds=5, timeout_seconds=6 * 3600, accelerator="tpu-v5e-8")
def train(data: dict[str, Any], lr: float, epochs: int = 200) -> dict[str, float]:
    """Full-batch gradient descent on a 1-D linear model (stands in for hours on a TPU)."""
    xs, ys = data["train"]
    w, b = 0.0, 0.0
    n = len(xs)
    for epoch in range(epochs):
        grad_w = sum((w * x + b - y) * x for x, y in zip(xs, ys, strict=True)) * 2 / n
        grad_b = sum((w * x + b - y) for x, y in zip(xs, ys, strict=True)) * 2 / n
        w, b = w - lr * grad_w, b - lr * grad_b
        if epoch % 50 == 0:
            print(f"lr={lr} epoch={epoch} w={w:.3f} b={b:.3f}")
    return {"w": w, "b": b, "lr": lr}


@kinetic_task(retries=1)
def evaluate(data: dict[str, Any], model: dict[str, float]) -> float:
    """Validation mean squared error."""
    xs, ys = data["valid"]
    mse = sum((model["w"] * x + model["b"] - y) ** 2 for x, y in zip(xs, ys, strict=True)) / len(xs)
    print(f"validation mse={mse:.5f} for lr={model['lr']}")
    return mse


@task
def publish_if_better(model: dict[str, float], mse: float) -> bool:
    """Publish the model when it beats the best one so far (a local file here)."""
    logger = get_run_logger()
    best = json.loads(BEST_MODEL.read_text()) if BEST_MODEL.exists() else None
    if best is not None and best["mse"] <= mse:
        logger.info("Keeping the published model (mse %.5f <= %.5f).", best["mse"], mse)
        return False
    BEST_MODEL.parent.mkdir(parents=True, exist_ok=True)
    BEST_MODEL.write_text(json.dumps({"model": model, "mse": mse}))
    logger.info("Published a new model with mse %.5f to %s.", mse, BEST_MODEL)
    return True


@flow(name="nightly-training", log_prints=True)
async def nightly_training(
    n_samples: int = 2000, seed: int = 7, lrs: tuple[float, ...] = (0.05, 0.1, 0.3)
) -> dict[str, Any]:
    data = await prepare(n_samples, seed)
    # One Kinetic batch for the sweep, with a progress artifact while it runs.
    models = await kinetic_map(train, inputs=[(data, lr) for lr in lrs], max_concurrency=4)
    mses = await asyncio.gather(*[evaluate(data, m) for m in models])
    best_mse, best_model = min(zip(mses, models, strict=True), key=lambda pair: pair[0])
    published = publish_if_better(best_model, best_mse)
    return {"model": best_model, "mse": best_mse, "published": published}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--serve", action="store_true", help="serve with a daily cron schedule")
    parser.add_argument("--cron", default="0 2 * * *", help="cron schedule when serving (UTC)")
    args = parser.parse_args()
    if args.serve:
        nightly_training.serve(name="nightly-training", cron=args.cron)
        return
    print(json.dumps(asyncio.run(nightly_training()), indent=2, default=str))


if __name__ == "__main__":
    main()
