"""A stand-in for the Quickstart's ``mylab``: a Trainer that takes a few real steps.

It descends a one-parameter quadratic with the configured learning rate, so the metrics depend on
the Task's stdin, and it checkpoints the way the worker asks: a temporary file, then os.replace.
"""

import json
import os
import random
import time
from pathlib import Path

STEPS = 6


class Trainer:
    def __init__(self, config, state=None):
        self.config = json.loads(config)
        if state is None:
            seed = random.Random(self.config["seed"])
            state = {"step_count": 0, "weight": seed.uniform(1.0, 2.0), "losses": []}
        self.step_count = state["step_count"]
        self.weight = state["weight"]
        self.losses = state["losses"]

    @classmethod
    def resume(cls, checkpoint):
        saved = json.loads(Path(checkpoint).read_text())
        return cls(saved["config"].encode(), saved["state"])

    @property
    def done(self):
        return self.step_count >= STEPS

    def step(self):
        time.sleep(0.05)
        gradient = 2 * self.weight
        self.weight -= self.config["lr"] * 100 * gradient
        self.losses.append(self.weight**2)
        self.step_count += 1

    def save(self, path):
        path = Path(path)
        temporary = path.with_name(f".{path.name}.tmp")
        state = {"step_count": self.step_count, "weight": self.weight, "losses": self.losses}
        data = json.dumps({"config": json.dumps(self.config, sort_keys=True), "state": state})
        temporary.write_text(data)
        os.replace(temporary, path)

    def metrics_json(self):
        metrics = {
            "config": self.config,
            "steps": self.step_count,
            "loss": self.losses[-1],
            "first_loss": self.losses[0],
        }
        return json.dumps(metrics, sort_keys=True) + "\n"
