"""The argparse validators both command lines share, and the quiet exit after a broken pipe."""

from __future__ import annotations

import argparse
import io
import os
from pathlib import Path

import pytest

from codec import cli_args


def test_a_port_is_1_to_65535() -> None:
    assert (cli_args.port("1"), cli_args.port("65535")) == (1, 65535)
    with pytest.raises(argparse.ArgumentTypeError, match="99999 is not a port: use 1-65535"):
        cli_args.port("99999")
    with pytest.raises(argparse.ArgumentTypeError, match="'http' is not a port number"):
        cli_args.port("http")


@pytest.mark.parametrize(("check", "least"), [(cli_args.count, 0), (cli_args.positive, 1)])
def test_whole_numbers_have_a_least_value(check: object, least: int) -> None:
    assert callable(check)
    assert check(str(least)) == least and check("12") == 12
    for bad in (str(least - 1), "1.5", "many"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected a whole number, {least} or more"):
            check(bad)


def test_a_workers_count_is_auto_or_1_or_more() -> None:
    assert [cli_args.workers_count(text) for text in ("auto", "1", "16")] == ["auto", 1, 16]
    for bad in ("0", "-2", "1.5", "Auto", "all"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number, 1 or more, or auto"):
            cli_args.workers_count(bad)


def test_seconds_are_more_than_zero() -> None:
    assert cli_args.seconds("0.25") == 0.25
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected seconds, more than 0"):
            cli_args.seconds(bad)


def test_discard_points_the_descriptor_at_dev_null(tmp_path: Path) -> None:
    cli_args.discard(io.StringIO())  # not a file: nothing to do
    path = tmp_path / "out"
    with open(path, "w") as out:
        cli_args.discard(out)
        out.write("gone")
        out.flush()
        assert os.path.samefile(f"/proc/self/fd/{out.fileno()}", os.devnull)
    assert path.read_text() == ""
