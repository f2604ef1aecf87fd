"""benchmarks/accuracy_over_seeds.py's table: means, deltas against float32 and
the paired (same seed) delta with its standard error, from run summaries."""
import json
import os

import pytest

from benchmarks import accuracy_over_seeds as acc

pytestmark = pytest.mark.unit


def write(logdir, label, seed, accuracy):
    directory = acc.run_dir(str(logdir), "mlp", label, seed)
    os.makedirs(directory)
    summary = {"test_accuracy": accuracy, "push_ratio": 64.0, "pull_ratio": 128.0}
    with open(os.path.join(directory, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f)


def test_paired_delta_uses_only_the_seeds_both_rows_have(tmp_path):
    for seed, value in {1: 0.80, 2: 0.90, 3: 0.85}.items():
        write(tmp_path, "float32", seed, value)
    write(tmp_path, "block1.9_pull1", 1, 0.79)  # -1 point
    write(tmp_path, "block1.9_pull1", 2, 0.87)  # -3 points; seed 3 missing
    text = acc.table(str(tmp_path), ["mlp"], ["float32", "block1.9_pull1"], [1, 2, 3], 1000,
                     1000, pull_s=1.0)
    row = next(line for line in text.splitlines() if "block1.9_pull1" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "2"
    assert cells[3] == "83.00 +- 5.66"
    assert cells[4] == "-2.00"  # against float32's mean over its 3 seeds, 85.00
    assert cells[5] == "-2.00 +- 1.00"  # mean of (-1, -3), standard error 1.41 / sqrt(2)
    assert cells[6:] == ["0.500", "0.250"]
    assert "pull the model at s = 1" in text


def test_pull_variants_name_the_pull_s_only_where_it_differs():
    variants = acc.variants(1000, pull_s=1.0)
    assert "block1" in variants and "block1_pull1" not in variants
    assert variants["block1.9_pull1"][-1] == "--pull_sparsity_multiplier=1.0"
    assert acc.variants(1000)["block1.9"][-1] == "--pull_sparsity_multiplier=1.90"
