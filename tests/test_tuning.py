"""The tuning database as a context property: validated, and its fingerprint (not its path) in the token."""

from __future__ import annotations

import shutil

import pytest
from conftest import build_add_relu

import nnadapter_tvm as nna
from nnadapter_tvm.token import model_token


def fake_database(path, records: str = "") -> str:
    path.mkdir()
    (path / "database_workload.json").write_text("")
    (path / "database_tuning_record.json").write_text(records)
    return str(path)


def token(props: str) -> str:
    return model_token(build_add_relu(), nna.Context([nna.Device.acquire("llvm")], props))


def test_database_fingerprint_enters_the_token(tmp_path):
    a = fake_database(tmp_path / "a")
    b = str(tmp_path / "b")
    shutil.copytree(a, b)
    untuned, tuned_a, tuned_b = token(""), token(f"TUNING_DATABASE={a};"), token(f"TUNING_DATABASE={b};")
    assert untuned != tuned_a, "tuned and untuned caches must not collide"
    assert tuned_a == tuned_b, "the same records in another directory are the same compiled code"
    (tmp_path / "b" / "database_tuning_record.json").write_text("[0, []]\n")
    assert token(f"TUNING_DATABASE={b};") != tuned_a, "new records give a new token"


def test_a_directory_without_a_database_is_refused(tmp_path):
    with pytest.raises(nna.NNAdapterError, match=r"TUNING_DATABASE.*no MetaSchedule database"):
        nna.Context([nna.Device.acquire("llvm")], f"TUNING_DATABASE={tmp_path};")
