"""A tiny stateful model.json for tests: an accumulator. State `acc` (float32[4],
initially [0, 1, 2, 3]) becomes acc + x each step; the step returns y = 2 * (acc + x)."""

import json
import os

ACC_DOC = {
    "format": "aotplan.model", "version": 1, "name": "acc",
    "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}, {"name": "acc", "dtype": "float32", "shape": [4]}],
    "outputs": ["y"],
    "constants": [{"name": "two", "dtype": "float32", "shape": [], "value": 2.0},
                  {"name": "start", "dtype": "float32", "shape": [4], "value": [0.0, 1.0, 2.0, 3.0]}],
    "nodes": [{"name": "add", "op": "add", "inputs": ["acc", "x"], "outputs": ["acc_new"]},
              {"name": "double", "op": "mul", "inputs": ["acc_new", "two"], "outputs": ["y"]}],
    "states": [{"input": "acc", "output": "acc_new", "init": "start"}],
}


def accumulator(folder, mutate=None):
    """Write the accumulator's model.json (edited by `mutate(doc)`) into `folder` -> its path."""
    doc = json.loads(json.dumps(ACC_DOC))
    if mutate:
        mutate(doc)
    path = os.path.join(str(folder), "model.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path
