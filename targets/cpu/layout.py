"""NHWC for the CPU: ``ConvertLayout`` moves convolutions (and with them the element-wise ops, pools,
concatenations and reductions around them) to NHWC, so that the channel axis is the contiguous one for
any channel count; the graph's NCHW inputs and outputs get one transpose each."""

from __future__ import annotations

import logging

import tvm
from tvm import relax

from nnadapter_tvm.targets.relax_passes import legalize_ops

log = logging.getLogger("nnadapter_tvm")

#: Ops whose layout inference ``ConvertLayout`` handles on the graphs seen so far.  Others can trip it
#: (a channel shuffle's rank-5 reshape/stack: "can't find S in source layout"), and it then fails for
#: the whole module; on a retry they are lowered to TIR first, so that ``ConvertLayout`` treats them as
#: layout-unaware and hands them their original layout.
LAYOUT_SAFE_OPS = frozenset(
    "relax." + name
    for name in [
        "nn.conv2d",
        "nn.max_pool2d",
        "nn.avg_pool2d",
        "nn.adaptive_avg_pool2d",
        "nn.batch_norm",
        "concat",
        "nn.relu",
        "clip",
        "sigmoid",
        "tanh",
        "add",
        "subtract",
        "multiply",
        "divide",
        "maximum",
        "minimum",
    ]
)


def _has_conv2d(mod: tvm.IRModule) -> bool:
    found = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "relax.nn.conv2d":
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


def to_nhwc(mod: tvm.IRModule) -> tvm.IRModule:
    """Convolutions (and the layout-agnostic ops around them) in NHWC; ``mod`` unchanged on failure (the
    convolutions then convert their own input and output, see ``lowering.Lowering``)."""
    if not _has_conv2d(mod):
        return mod
    convert = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "OIHW"]})
    try:
        return convert(mod)
    except Exception as err:  # retried below
        log.debug("cpu schedules: ConvertLayout failed (%s); retrying with fewer ops", err)
    try:
        return convert(legalize_ops(skip_ops=sorted(LAYOUT_SAFE_OPS))(mod))
    except Exception as err:  # keep NCHW rather than fail
        log.debug("cpu schedules: ConvertLayout failed again, keeping NCHW: %s", err)
        return mod
