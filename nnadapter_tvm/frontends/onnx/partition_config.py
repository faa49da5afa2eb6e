"""Paddle Lite's subgraph partition config: lines ``op_type:in1,in2:out1`` naming nodes kept on the host.

Rules (the spec's ``set_nnadapter_subgraph_partition_config_path``): one node or class of nodes per
line; the op type, input names and output names are separated by ``:``, names by ``,``; names may be
left out (``op::out``, ``op:in``, ``op``), and a line with no names matches every node of that type.
Blank lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import dataclasses
import os
import re

import onnx

from nnadapter_tvm.errors import fail

_NAME = re.compile(r"^[^\s:,]+$")


@dataclasses.dataclass(frozen=True)
class Rule:
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    line: int

    def matches(self, node: onnx.NodeProto) -> bool:
        return (
            node.op_type == self.op_type
            and all(name in node.input for name in self.inputs)
            and all(name in node.output for name in self.outputs)
        )


class PartitionConfig:
    def __init__(self, rules: list[Rule], source: str):
        self.rules = rules
        self.source = source

    @classmethod
    def parse(cls, text: str, source: str = "partition config") -> PartitionConfig:
        rules = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(":")
            if len(parts) > 3:
                fail(
                    f"{source} line {number}: '{raw}' has {len(parts)} ':'-separated fields, expected at most 3 "
                    "(op_type:inputs:outputs)"
                )
            op_type = parts[0].strip()
            names = [[n.strip() for n in p.split(",") if n.strip()] for p in parts[1:]] + [[], []]
            for name in [op_type, *names[0], *names[1]]:
                if not _NAME.match(name):
                    fail(f"{source} line {number}: '{raw}': '{name}' is not an op type or tensor name")
            rules.append(Rule(op_type, tuple(names[0]), tuple(names[1]), number))
        return cls(rules, source)

    @classmethod
    def load(cls, spec: str | os.PathLike) -> PartitionConfig:
        """A config from a file path, or the config text itself when no such file exists and it has a ':' or newline."""
        path = os.fspath(spec)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return cls.parse(f.read(), path)
        if "\n" in path or ":" in path or not os.path.splitext(path)[1]:
            return cls.parse(path)
        fail(f"partition config file {path} does not exist")

    def matches(self, node: onnx.NodeProto) -> bool:
        return any(rule.matches(node) for rule in self.rules)
