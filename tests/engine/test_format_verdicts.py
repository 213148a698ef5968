"""The compute format a load measured, kept for later starts (engine/format_verdicts.py): by
the weights' files, the machine and the software; a file that cannot be read is set aside."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from inference.engine import format_verdicts
from inference.engine.format_verdicts import Verdict, Verdicts, weights_key

# One room's code called directly: no database, so the PostgreSQL pass leaves it out.
pytestmark = pytest.mark.database_independent

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


def test_other_weights_in_the_same_folder_are_timed_again(model_dir, tmp_path):
    before = weights_key(str(model_dir))
    assert weights_key(str(model_dir)) == before
    assert weights_key(str(model_dir), role="draft") != before
    (model_dir / "model.safetensors").write_bytes(b"y" * 65)
    assert weights_key(str(model_dir)) != before
    changed = weights_key(str(model_dir))
    os.utime(model_dir / "model.safetensors", ns=(1, 1))
    assert weights_key(str(model_dir)) != changed
    # A location that is not there (a hub model not downloaded) has a key, the same each time.
    missing = str(tmp_path / "nowhere")
    assert weights_key(missing) == weights_key(missing) != weights_key(str(model_dir))


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


WRONG = json.dumps({"version": 1, "verdicts": {"k": {**VERDICT.__dict__, "measured_at": "x"}}})
ODD = json.dumps({"version": 1, "verdicts": {"k": {**VERDICT.__dict__, "format": "int3"}}})


@pytest.mark.parametrize("text", ["{not json", '{"version": 99, "verdicts": {}}', "[]", WRONG, ODD])
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


def test_a_file_that_cannot_be_set_aside_or_written_fails_nothing(tmp_path, caplog):
    folder = tmp_path / "read-only"
    folder.mkdir()
    (folder / "compute-formats.json").write_text("{not json")
    folder.chmod(0o500)
    try:
        verdicts = Verdicts(str(folder / "compute-formats.json"))
        verdicts.put("model:/a:1", VERDICT)  # kept in memory
        assert verdicts.get("model:/a:1") == VERDICT
    finally:
        folder.chmod(0o700)
    if os.geteuid() != 0:  # root writes anyway
        assert "not saved" in caplog.text


def test_a_restarted_engine_keeps_what_its_predecessor_measured(tmp_path):
    from inference.engine import compute_format

    for path in ("", str(tmp_path / "compute-formats.json")):
        compute_format.keep_verdicts(path)
        compute_format._verdicts.put("model:/a:1", VERDICT)
        compute_format.keep_verdicts(path)  # the supervisor's new engine, same setting
        assert compute_format._verdicts.get("model:/a:1") == VERDICT
    compute_format.keep_verdicts("")
