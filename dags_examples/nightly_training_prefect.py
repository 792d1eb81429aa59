"""Nightly training as a Prefect 3 flow: prepare -> train (a sweep) -> evaluate -> publish.

The heavy steps are ``@kinetic_task``s: their bodies run as detached Kinetic jobs (local
processes on the embedded default; TPU/GPU pods with a KineticConfig block or
``KINETIC_BACKEND=gke``). Retries reattach to running jobs instead of relaunching them.

Data moves only through storage: each job writes into its output folder
(``KINETIC_OUTPUT_DIR``) and returns a small reference; the next job downloads that folder.
The best model lives in storage: ``publish`` runs one job per flow run under a fixed
idempotency key, and each attempt of that key starts with the previous one's outputs.

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
from typing import Any

from kinetic_prefect import kinetic_map, kinetic_task
from prefect import flow, get_run_logger, task

#: One idempotency key for the model registry: attempt N+1 inherits attempt N's outputs.
REGISTRY_KEY = os.environ.get("NIGHTLY_REGISTRY_KEY", "nightly_training_prefect/registry")


def job_ref(**extra: Any) -> dict[str, Any]:
    """This job's result by reference: where the next job finds its output folder."""
    return {
        "job_id": os.environ["KINETIC_JOB_ID"],
        "storage": os.environ["KINETIC_JOB_STORAGE"],
        **extra,
    }


def fetch_outputs(ref: dict[str, Any]) -> str:
    """Download another job's output folder (inside a job); return the local folder."""
    import tempfile

    import kinetic_core as kc

    handle = kc.attach(ref["job_id"], target={"storage": ref["storage"]})
    return handle.download_outputs(tempfile.mkdtemp(prefix="kinetic-in-"))


def _load(ref: dict[str, Any], name: str) -> Any:
    with open(os.path.join(fetch_outputs(ref), name)) as fh:
        return json.load(fh)


def _save(name: str, value: Any) -> None:
    path = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], name)
    with open(path + ".tmp", "w") as fh:
        json.dump(value, fh)
    os.replace(path + ".tmp", path)


@kinetic_task(retries=2, retry_delay_seconds=5, timeout_seconds=3600, life_span=3600)
def prepare(n_samples: int, seed: int) -> dict[str, Any]:
    """Synthetic regression data y = 3x - 2 + noise, split into train and validation."""
    rng = random.Random(seed)
    xs = [rng.uniform(-1, 1) for _ in range(n_samples)]
    ys = [3.0 * x - 2.0 + rng.gauss(0, 0.1) for x in xs]
    cut = int(0.8 * n_samples)
    _save("data.json", {"train": (xs[:cut], ys[:cut]), "valid": (xs[cut:], ys[cut:])})
    print(f"prepared {n_samples} samples (seed {seed})")
    return job_ref(n_samples=n_samples)


@kinetic_task(retries=2, retry_delay_seconds=5, timeout_seconds=6 * 3600, accelerator="tpu-v5e-8")
def train(data: dict[str, Any], lr: float, epochs: int = 200) -> dict[str, Any]:
    """Full-batch gradient descent on a 1-D linear model (stands in for hours on a TPU)."""
    xs, ys = _load(data, "data.json")["train"]
    w, b = 0.0, 0.0
    n = len(xs)
    for epoch in range(epochs):
        grad_w = sum((w * x + b - y) * x for x, y in zip(xs, ys, strict=True)) * 2 / n
        grad_b = sum((w * x + b - y) for x, y in zip(xs, ys, strict=True)) * 2 / n
        w, b = w - lr * grad_w, b - lr * grad_b
        if epoch % 50 == 0:
            print(f"lr={lr} epoch={epoch} w={w:.3f} b={b:.3f}")
    _save("model.json", {"w": w, "b": b, "lr": lr})
    return job_ref(lr=lr)


@kinetic_task(retries=1)
def evaluate(data: dict[str, Any], model: dict[str, Any]) -> float:
    """Validation mean squared error."""
    xs, ys = _load(data, "data.json")["valid"]
    params = _load(model, "model.json")
    mse = sum((params["w"] * x + params["b"] - y) ** 2 for x, y in zip(xs, ys, strict=True)) / len(
        xs
    )
    print(f"validation mse={mse:.5f} for lr={model['lr']}")
    return mse


def update_registry(model: dict[str, Any], mse: float) -> dict[str, Any]:
    """The registry job: its output folder starts as the previous attempt's (best.json and
    the published model); publish this model there if it beats the best."""
    import shutil

    out = os.environ["KINETIC_OUTPUT_DIR"]
    best_path = os.path.join(out, "best.json")
    best = float("inf")
    if os.path.exists(best_path):
        with open(best_path) as fh:
            best = float(json.load(fh)["mse"])
    published = mse < best
    if published:
        shutil.copyfile(
            os.path.join(fetch_outputs(model), "model.json"), os.path.join(out, "model.json")
        )
        _save("best.json", {"mse": mse, "model_job": model["job_id"]})
    if published:
        print(f"published this model: mse={mse:.5f} beats the best so far ({best:.5f})")
    else:
        print(f"kept the published model: mse={mse:.5f} does not beat {best:.5f}")
    return job_ref(published=published, best_mse=min(best, mse))


@task
def publish(model: dict[str, Any], mse: float) -> dict[str, Any]:
    """Run the registry job (one attempt per flow run, same key: it inherits the best)."""
    import kinetic_core as kc

    job = kc.submit(update_registry, (model, mse), idempotency_key=REGISTRY_KEY, name="registry")
    registry = dict(job.result(timeout=600))
    get_run_logger().info("registry: %s", registry)
    return registry


@flow(name="nightly-training", log_prints=True)
async def nightly_training(
    n_samples: int = 2000, seed: int = 7, lrs: tuple[float, ...] = (0.05, 0.1, 0.3)
) -> dict[str, Any]:
    data = await prepare(n_samples, seed)
    # One Kinetic batch for the sweep, with a progress artifact while it runs.
    models = await kinetic_map(train, inputs=[(data, lr) for lr in lrs], max_concurrency=4)
    mses = await asyncio.gather(*[evaluate(data, m) for m in models])
    best_mse, best_model = min(zip(mses, models, strict=True), key=lambda pair: pair[0])
    registry = publish(best_model, best_mse)
    return {"model": best_model, "mse": best_mse, "registry": registry}


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
