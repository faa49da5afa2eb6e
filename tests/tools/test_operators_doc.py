"""docs/operators.md is generated from the registry and must not go stale."""

import pathlib

from nnadapter_tvm.tools import opdoc

DOC = pathlib.Path(__file__).parents[2] / "docs" / "operators.md"


def test_operators_doc_is_current():
    assert DOC.read_text() == opdoc.render(), "regenerate: python -m nnadapter_tvm.tools.opdoc > docs/operators.md"
