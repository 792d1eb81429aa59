"""The main job on the embedded default: train, then evaluate, as detached kinetic jobs.

Run with ``make demo`` (or ``python dags_examples/demo_core.py``). Nothing to install or
configure: jobs run as detached local processes, state lives under KINETIC_STORAGE (``make
demo``: ``.kinetic-demo/`` in the checkout; default ``~/.kinetic``; ``gs://bucket/prefix``
works the same). Data moves only through
``kc.Data`` arguments, the jobs' output folders and results: the same code runs on GKE.
"""

from __future__ import annotations

import json
import os
import random
import tempfile

import kinetic_core as kc


@kc.run(tags={"pipeline": "nightly-demo"}, life_span=600)
def train(dataset: str, epochs: int, lr: float = 0.1) -> dict[str, object]:
    """Fit y = 3x + 1 with SGD, resuming from the checkpoint in the output folder."""
    with open(os.path.join(dataset, "train.json")) as fh:
        data = json.load(fh)
    ckpt = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "model.json")
    model = {"w": 0.0, "b": 0.0, "epoch": 0}
    if os.path.exists(ckpt):  # a later attempt of the same key: resume
        with open(ckpt) as fh:
            model = json.load(fh)
    loss = float("nan")
    for epoch in range(int(model["epoch"]), epochs):
        for x, y in data:
            err = (model["w"] * x + model["b"]) - y
            model["w"] -= lr * err * x
            model["b"] -= lr * err
        loss = sum(((model["w"] * x + model["b"]) - y) ** 2 for x, y in data) / len(data)
        model["epoch"] = epoch + 1
        with open(ckpt + ".tmp", "w") as fh:
            json.dump(model, fh)
        os.replace(ckpt + ".tmp", ckpt)
        print(f"epoch {epoch + 1}/{epochs} loss={loss:.5f}", flush=True)
    kc.sync_outputs()
    return {"train_loss": loss, "epochs": model["epoch"]}


@kc.run(tags={"pipeline": "nightly-demo"}, life_span=600)
def evaluate(model_dir: str, dataset: str) -> dict[str, float]:
    """Score the trained model (a Data of the train job's outputs) on held-out points."""
    with open(os.path.join(model_dir, "model.json")) as fh:
        model = json.load(fh)
    with open(os.path.join(dataset, "test.json")) as fh:
        test = json.load(fh)
    mse = sum(((model["w"] * x + model["b"]) - y) ** 2 for x, y in test) / len(test)
    print(f"evaluated {len(test)} points: mse={mse:.6f}", flush=True)
    return {"mse": mse}


def make_dataset(folder: str, seed: int = 7) -> str:
    """A local folder the jobs receive as ``kc.Data`` (uploaded once, content-addressed)."""
    rng = random.Random(seed)
    train_rows = [(x / 100, 3 * x / 100 + 1 + rng.gauss(0, 0.05)) for x in range(200)]
    test_rows = [(x / 50, 3 * x / 50 + 1) for x in range(50)]
    for name, rows in (("train.json", train_rows), ("test.json", test_rows)):
        with open(os.path.join(folder, name), "w") as fh:
            json.dump(rows, fh)
    return folder


def main() -> dict[str, float]:
    storage = kc.Target().resolve().storage
    print(f"kinetic demo: backend={kc.Target().resolve().backend} storage={storage}\n")
    with tempfile.TemporaryDirectory(prefix="kinetic-demo-") as tmp:
        dataset = kc.Data(make_dataset(tmp))
        train_job = train.run_async(dataset, 20, lr=0.2)
        print(f"train    job {train_job.job_id}: {train_job.status()}")
        trained = train_job.result(timeout=300)
        state = train_job.state()
        print(
            f"train    job {train_job.job_id}: {state.status} (exit {state.exit_code}) -> {trained}"
        )

        eval_job = evaluate.run_async(train_job.outputs, dataset)
        metrics = eval_job.result(timeout=300)
    state = eval_job.state()
    print(f"evaluate job {eval_job.job_id}: {state.status} (exit {state.exit_code}) -> {metrics}")
    print(f"\nmodel in {train_job.outputs.path}")
    print(f"metrics: mse={metrics['mse']:.6f}")
    return metrics


if __name__ == "__main__":
    main()
