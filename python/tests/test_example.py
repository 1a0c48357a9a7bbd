"""examples/python/toy_decoder.py runs (shortened) and prints its table."""

import os
import runpy
import sys

import pytest

pytest.importorskip("torch")
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python",
                       "toy_decoder.py")


def test_toy_decoder(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["toy_decoder.py", "q4_0", "--prompt", "9", "--steps", "2"])
    runpy.run_path(EXAMPLE, run_name="__main__")
    table = capsys.readouterr().out
    assert "| q4_0 | 288 |" in table and "| f16 | 1024 |" in table


OVERHEAD = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "python_overhead.py")


@pytest.mark.parametrize("kind", [[], ["--numpy"]], ids=["torch", "numpy"])
def test_overhead_script(monkeypatch, capsys, kind):
    """scripts/python_overhead.py (shortened): the native loop, plan.run, the overhead."""
    monkeypatch.setattr(sys, "argv", ["python_overhead.py", "--keys", "1", "--calls", "3",
                                      "--rounds", "1"] + kind)
    runpy.run_path(OVERHEAD, run_name="__main__")
    report = capsys.readouterr().out
    assert "native (C++ loop)" in report and report.count("overhead") == 2
