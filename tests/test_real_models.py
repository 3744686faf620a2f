"""The real-model corpus (benchmarks/corpus.py): each third-party model tunes with parity
passed, or is refused up front (exit 2, nothing created). A parity miss counts only with a
verdict against the graph in float64, and a trace layer by layer, that do not find TVM off."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from corpus import MODELS, fetch  # noqa: E402
from real_models import try_model  # noqa: E402

pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def corpus():
    return {m.name: m for m in fetch()}


@pytest.mark.parametrize("name", [m.name for m in MODELS])
def test_real_model_tunes_or_is_refused_up_front(corpus, name, tmp_path):
    row = try_model(corpus[name], trials=2, frames=3, sessions=tmp_path, timeout=1500)
    if row["outcome"] == "refused":
        assert row["exit"] == 2 and not row["session_created"], row
        assert "\n" not in row["message"] and row["message"].startswith("tvmtui: "), row
        return
    assert row["outcome"] in ("tuned", "parity failed"), row
    if row["outcome"] == "parity failed":  # a verdict, and not against TVM (nor its graph)
        assert row["verdict"] and not re.search(r"tvm-tuned[^;]* is off", row["verdict"]), row
    assert not row["failed_tasks"] or row["trials"] >= 1, row
