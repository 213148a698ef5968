"""The compute format a load measured, kept for later starts (engine/format_verdicts.py): by
the weights' files, the machine and the software; a file that cannot be read is set aside."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from inference.engine import format_verdicts
from inference.engine.format_verdicts import Verdict, Verdicts, weights_key

VERDICT = Verdict("float32", "decode steps at batch 1/8 measured 9.0/20.0 ms quantized", 1.8e9)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"x" * 64)
    return folder


def test_a_verdict_outlives_the_process_that_measured_it(model_dir, tmp_path):
    path = tmp_path / "var" / "compute-formats.json"
    Verdicts(str(path)).put(weights_key(str(model_dir)), VERDICT)
    assert Verdicts(str(path)).get(weights_key(str(model_dir))) == VERDICT
    assert path.stat().st_mode & 0o777 == 0o600
    assert Verdicts("").get(weights_key(str(model_dir))) is None  # memory only: none kept


def test_other_weights_in_the_same_folder_are_timed_again(model_dir):
    before = weights_key(str(model_dir))
    assert weights_key(str(model_dir)) == before
    assert weights_key(str(model_dir), "draft") != before
    (model_dir / "model.safetensors").write_bytes(b"y" * 65)
    assert weights_key(str(model_dir)) != before
    (model_dir / "notes.txt").write_text("not weights")
    changed = weights_key(str(model_dir))
    os.utime(model_dir / "notes.txt", ns=(1, 1))
    assert weights_key(str(model_dir)) == changed


def test_another_machine_or_software_is_timed_again(model_dir, tmp_path, monkeypatch):
    path = tmp_path / "compute-formats.json"
    Verdicts(str(path)).put(weights_key(str(model_dir)), VERDICT)
    assert "mlx=" in format_verdicts.machine_key() and "cores=" in format_verdicts.machine_key()
    monkeypatch.setattr(format_verdicts, "machine_key", lambda: "another CPU|cores=64")
    assert Verdicts(str(path)).get(weights_key(str(model_dir))) is None


def test_two_processes_keep_both_their_verdicts(tmp_path):
    path = tmp_path / "compute-formats.json"
    first, second = Verdicts(str(path)), Verdicts(str(path))
    first.put("model:/a:1", VERDICT)
    second.put("model:/b:2", VERDICT)
    assert {Verdicts(str(path)).get(key) for key in ("model:/a:1", "model:/b:2")} == {VERDICT}


@pytest.mark.parametrize("text", ["{not json", '{"version": 99, "verdicts": {}}', "[]"])
def test_an_unreadable_file_is_set_aside_and_rewritten(text, tmp_path, caplog):
    path = tmp_path / "compute-formats.json"
    path.write_text(text)
    verdicts = Verdicts(str(path))
    assert verdicts.get("model:/a:1") is None
    assert "unreadable" in caplog.text and "timed again" in caplog.text
    assert (tmp_path / "compute-formats.json.unreadable").read_text() == text
    verdicts.put("model:/a:1", VERDICT)
    assert json.loads(path.read_text())["version"] == format_verdicts.VERSION
    assert Verdicts(str(path)).get("model:/a:1") == VERDICT
