"""The report renders the committed run: every section, the seed beside ours, and a well-formed chart."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from bench.report import main, read_results

RESULTS = sorted(Path(__file__).parent.joinpath("results").glob("*.txt"))


@pytest.mark.skipif(not RESULTS, reason="no bench/results/*.txt run is committed yet")
def test_report_renders_the_newest_committed_run(tmp_path: Path) -> None:
    newest = RESULTS[-1]
    results = read_results(newest)
    names = [result["fixture"]["name"] for result in results["TRANSPORT_PERF"]]
    assert names == ["dsh-synthetic", "realistic", "long-session"]
    assert main([str(newest), "--docs", str(tmp_path), "--command", "make bench"]) == 0
    text = (tmp_path / "benchmarks.md").read_text()
    for needle in ("## Goals", "69,433,638", "Lossless packed", "Follow under load", "Whitespace-prefix", "sqlite"):
        assert needle in text, needle
    ElementTree.fromstring((tmp_path / "benchmarks.svg").read_text())


def test_report_refuses_a_file_without_transport_results(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("HISTORY_FOLLOW_LOAD_RESULT {}\nnot a result line\n")
    assert main([str(empty), "--docs", str(tmp_path)]) == 1
    assert read_results(empty) == {"FOLLOW_LOAD": [{}]}
