"""The README's set-up commands and its runnable tour stay true."""

import pathlib
import re

README = (pathlib.Path(__file__).parents[2] / "README.md").read_text()


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


def test_docs_point_only_inside_the_repository():
    """A user's clone holds the docs and nothing beside them: every relative link of the README and docs/
    resolves to a file of the repository, and no text names a file outside it."""
    root = pathlib.Path(__file__).parents[2]
    outside = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted(root.glob("*/README.md"))]:
        text = doc.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same file
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists() or root not in path.parents:
                outside.append(f"{doc.relative_to(root)} links {target}")
        for name in re.findall(r"\.\./[\w./-]+|\bDESIGN\.md\b", text):
            outside.append(f"{doc.relative_to(root)} names {name}")
    assert not outside, "\n".join(outside)
