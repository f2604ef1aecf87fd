"""The decoder of Golomb positions into a list (DecodeGolombToPositions: what the parameter
server decodes every 3LC push into before adding it). On x86 with AVX2 it decodes rounds of 2-8
words with no check per word (DecodePositionsInRounds in custom_ops/core/bitmask_simd.cc) and
hands a round that overran its window or reached a position >= n to the word-by-word decoder.
Checked on generated streams, valid and hostile (long runs of ones, truncations, flipped bits,
counts off, n at or far below a position, appended bytes, all ones, all zeros, noise; b from 0
to 12, every round size), against the portable decoder (TLC_CODEC_GENERIC=1, in a child
process) and, for the valid ones, against the positions and signs they were generated from."""
import os
import subprocess

import pytest

import core_driver

pytestmark = pytest.mark.unit

CASES = 12000


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """custom_ops/fuzz/golomb_decoder_driver.cc, built with the core."""
    return core_driver.build(tmp_path_factory, "golomb_decoder_driver")


def run(driver, seed, env):
    proc = subprocess.run([driver, str(CASES), str(seed), "positions"], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == CASES
    return [line.split(" ", 8) for line in lines]


@pytest.mark.parametrize("seed", [1, 2])
def test_listed_positions_as_the_portable_decoder_lists_them(driver, seed):
    """Every status and message, end bit and listed position the same as the portable decoder's;
    every valid stream listed as generated, signs included."""
    fast = run(driver, seed, dict(os.environ))
    portable = run(driver, seed, {**os.environ, "TLC_CODEC_GENERIC": "1"})
    for k, (a, b) in enumerate(zip(fast, portable)):
        assert a == b, (k, a, b)
    accepted = [f for f in fast if f[4] == "1"]
    refused = [f for f in fast if f[4] == "0"]
    generated = [f for f in accepted if f[7] == "1"]
    # Valid streams of every b, long enough for many rounds; refusals of every kind.
    assert len(accepted) > 5000 and len(refused) > 3000, (len(accepted), len(refused))
    assert {int(f[0]) for f in generated} == set(range(13))
    assert sum(int(f[1]) >= 100 for f in generated) > 1500
    messages = {f[8] for f in refused}
    assert any("gap exceeds" in m for m in messages), messages
    assert any("truncated" in m or "end" in m for m in messages), messages


def test_every_valid_stream_is_listed_as_generated(driver):
    """The default decoder on its own: no valid stream refused or listed otherwise than
    generated (positions and signs)."""
    fields = run(driver, 3, dict(os.environ))
    verdicts = [f[7] for f in fields]
    assert verdicts.count("1") > 1500, verdicts.count("1")
    assert "0" not in verdicts, [f for f in fields if f[7] == "0"][:3]
