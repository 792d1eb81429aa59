"""The main job on the embedded default: train, then evaluate, as detached kinetic jobs.

Run with ``make demo`` (or ``python dags_examples/demo_core.py``). Nothing to install or
configure: jobs run as detached local processes, state lives under ``~/.kinetic``
(override with KINETIC_STORAGE).
"""

from __future__ import annotations

import json
import os
import random

import kinetic_core as kc


@kc.run(tags={"pipeline": "nightly-demo"}, life_span=600)
def train(epochs: int, lr: float = 0.1, seed: int = 7) -> dict[str, object]:
    """Fit y = 3x + 1 with SGD and save the weights in the job's output dir."""
    rng = random.Random(seed)
    data = [(x / 100, 3 * x / 100 + 1 + rng.gauss(0, 0.05)) for x in range(200)]
    w = b = 0.0
    for epoch in range(epochs):
        for x, y in data:
            err = (w * x + b) - y
            w -= lr * err * x
            b -= lr * err
        loss = sum(((w * x + b) - y) ** 2 for x, y in data) / len(data)
        print(f"epoch {epoch + 1}/{epochs} loss={loss:.5f}", flush=True)
    path = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "model.json")
    with open(path, "w") as fh:
        json.dump({"w": w, "b": b}, fh)
    return {"model_path": path, "train_loss": loss}


@kc.run(tags={"pipeline": "nightly-demo"}, life_span=600)
def evaluate(model_path: str) -> dict[str, float]:
    """Score the saved model on held-out points."""
    with open(model_path) as fh:
        model = json.load(fh)
    test = [(x / 50, 3 * x / 50 + 1) for x in range(50)]
    mse = sum(((model["w"] * x + model["b"]) - y) ** 2 for x, y in test) / len(test)
    print(f"evaluated {len(test)} points: mse={mse:.6f}", flush=True)
    return {"mse": mse}


def main() -> None:
    storage = kc.Target().resolve().storage
    print(f"kinetic demo: backend=local storage={storage}\n")
    train_job = train.run_async(20, lr=0.2)
    print(f"train    job {train_job.job_id}: {train_job.status()}")
    trained = train_job.result(timeout=300)
    state = train_job.state()
    print(f"train    job {train_job.job_id}: {state.status} (exit {state.exit_code}) -> {trained}")

    eval_job = evaluate.run_async(trained["model_path"])
    metrics = eval_job.result(timeout=300)
    state = eval_job.state()
    print(f"evaluate job {eval_job.job_id}: {state.status} (exit {state.exit_code}) -> {metrics}")
    print(f"\nmetrics: mse={metrics['mse']:.6f}; inspect with `kinetic jobs list`")


if __name__ == "__main__":
    main()
