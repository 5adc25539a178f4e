"""plumbing/tables.py: the markdown-table builder and the results writer."""

import json
import os
from dataclasses import dataclass

import pytest

from plumbing import cli, records, tables


def test_md_table_cells_and_shape():
    lines = tables.md_table(["a", "b", "c"], [[1.23456, None, "x"], [2, 0.5, True]])
    assert lines == ["| a | b | c |", "|---|---|---|", "| 1.235 | — | x |", "| 2 | 0.500 | True |"]
    assert tables.md_table(["v"], [[0.5]], fmt=".1%") [-1] == "| 50.0% |"


def test_md_table_refuses_a_ragged_row():
    with pytest.raises(ValueError, match="2 cells under 3 columns"):
        tables.md_table(["a", "b", "c"], [[1, 2]])


@dataclass
class Cfg:
    steps: int = cli.arg(10, "steps")
    name: str = cli.arg("x", "name")


def test_save_json_puts_command_and_settings_first(tmp_path):
    path = tmp_path / "r.json"
    out = tables.save_json(dict(acc=0.5, command="ignored"), str(path), "demo.py", Cfg(steps=20))
    saved = json.loads(path.read_text())
    assert saved == out and list(saved)[:2] == ["command", "settings"]
    assert saved["command"] == "python demo.py --steps 20" and saved["settings"] == dict(steps=20, name="x")
    assert saved["acc"] == 0.5


def test_save_text_and_save_figure_replace_whole_files(tmp_path, monkeypatch):
    path = tmp_path / "r.md"
    tables.save_text("old\n", str(path))
    tables.save_text("| a |\n", str(path))
    assert path.read_text() == "| a |\n" and os.listdir(tmp_path) == ["r.md"]  # no temp file left

    class Broken:
        def savefig(self, f, **kw):
            f.write(b"half a png")
            raise RuntimeError("the figure failed")
    with pytest.raises(RuntimeError):
        tables.save_figure(Broken(), str(tmp_path / "r.md"))
    assert path.read_text() == "| a |\n" and os.listdir(tmp_path) == ["r.md"]  # the old file whole
    plt = tables.pyplot()
    fig = plt.figure(figsize=(1, 1))
    tables.save_figure(fig, str(tmp_path / "f.png"))
    plt.close(fig)
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_load_record_reads_back_the_same_settings_and_refuses_others_in_one_line(tmp_path):
    @dataclass
    class Settings:
        lr: float = 0.1
        out_dir: str = "a"
    path = str(tmp_path / "r.json")
    assert records.load_record(path, Settings(), "rows", "a record") == {}  # nothing there yet
    tables.save_json(dict(rows={"x": 1}), path, "r.py", Settings())
    assert records.load_record(path, Settings(out_dir="b"), "rows", "a record", same=("out_dir",)) == {"x": 1}
    with pytest.raises(cli.UserError, match="--out_dir"):
        records.load_record(path, Settings(out_dir="b"), "rows", "a record")
    with pytest.raises(cli.UserError, match=r"--lr 0.2 \(there: 0.1\)"):
        records.load_record(path, Settings(lr=0.2), "rows", "a record", same=("out_dir",))
    (tmp_path / "r.json").write_text('{"settings": {"lr"')  # cut short
    with pytest.raises(cli.UserError, match="r.json is not a record"):
        records.load_record(path, Settings(), "rows", "a record")
