"""The README's set-up commands and its runnable tour stay true."""

import pathlib
import re

README = (pathlib.Path(__file__).parents[1] / "README.md").read_text()


def test_readme_opens_with_the_two_commands():
    block = re.search(r"```sh\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert len(block) == 2
    assert block[0].endswith("nnadapter-tvm run")
    assert "[test]" in block[1] and "pytest" in block[1]


def test_readme_tour_runs():
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})


def test_readme_documents_every_context_property():
    from nnadapter_tvm.context import known_properties

    for key in known_properties():
        assert f"`{key}`" in README, key
