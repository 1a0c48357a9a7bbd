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
