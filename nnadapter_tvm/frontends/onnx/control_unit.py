"""Control flow in an imported ONNX graph: the ``ControlUnit`` an If, Loop or Scan node becomes and the
``Body`` graphs it carries (each a nested ``ImportedGraph`` with its own plan); ``control`` does the
import, ``nnadapter_tvm.session.control`` runs them.

Kept apart from the import so that ``plan`` can know control units (their bodies' compiled segments
are compiled with the graph's) while ``control`` plans the bodies: each imports this module, neither
imports the other back.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from nnadapter_tvm.frontends.onnx.values import Unit

if TYPE_CHECKING:
    from nnadapter_tvm.frontends.onnx.imported_graph import ImportedGraph
    from nnadapter_tvm.frontends.onnx.plan import Plan


@dataclasses.dataclass(eq=False)
class Body:
    """One branch or body graph: the nested imported graph, its plan and where its inputs come from."""

    attr: str  # then_branch, else_branch or body
    graph: ImportedGraph | None  # None: the branch did not import (``error``), see _import_if
    plan: Plan | None  # None with ``graph``
    own: int  # how many of graph.inputs are the body's own inputs (iteration number, states, scan slices)
    captured: list[int]  # per further input of graph.inputs: its index in the control unit's inputs
    error: str | None = None


@dataclasses.dataclass(eq=False)
class ControlUnit(Unit):
    """An If, Loop or Scan node run on the host around its compiled bodies.

    ``inputs`` are the node's present inputs (``slots`` gives each one's position among the node's
    inputs) followed by the outer values the bodies read."""

    bodies: dict[str, Body] = dataclasses.field(default_factory=dict)
    slots: list[int] = dataclasses.field(default_factory=list)
    opset: int = 0
    unrolled: int = 0  # a Loop imported as one body per iteration ("body#i"), see _unroll_loop
