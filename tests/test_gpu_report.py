"""The GPU tests' report folder: made when missing, nothing written without one."""
import json

from tests.gpu_report import report


def test_a_missing_folder_is_made(tmp_path, monkeypatch):
    folder = tmp_path / "not" / "yet"
    monkeypatch.setenv("DCPCTL_GPU_REPORT", str(folder))
    path = report("cell", {"ms": 1.5})
    assert path == folder / "cell.json" and json.loads(path.read_text()) == {"ms": 1.5}


def test_unset_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("DCPCTL_GPU_REPORT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert report("cell", {"ms": 1.5}) is None and list(tmp_path.iterdir()) == []
