"""Grouped convolutions with each group's output channels padded to whole vectors.

The CPU convolution vectorizes a block of output channels that divides a group's channel count, so that
the group (and the input channels it reads) does not vary inside a vector.  Shufflenet's groups of 34
channels got 2-wide blocks: a 1x1 grouped convolution of 28x28x136 ran at 11 GFLOP/s.  ``pad_groups``
(NHWC, after ``layout.to_nhwc``) gives such a convolution zero weights for ``ocgp`` (the next multiple of
the vector width) output channels a group, so its blocks are whole vectors, and takes each group's own
channels out again (reshape, slice, reshape: a copy).  That compaction is moved past the element-wise ops
that follow with a per-channel constant or none (batch norm, bias, ReLU: their constants padded the same
way), so they stay fused into the convolution's kernel and the compaction joins the copy that comes
next (shufflenet's channel shuffle) or becomes one of its own.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tvm
from tvm import relax

from nnadapter_tvm.targets.cpu.simd import channel_block
from nnadapter_tvm.targets.relax_passes import static_shape

#: Element-wise ops the compaction moves past: unary, or binary with a constant operand.
_UNARY = frozenset(["relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.silu"])
_BINARY = frozenset(["relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"])


def padded_group(oc: int, groups: int, lanes: int) -> int:
    """Output channels a group gets: ``oc // groups``, or its next multiple of ``lanes`` where that keeps
    more lanes at work than the narrow block ``channel_block`` would give."""
    ocg = oc // groups
    ocgp = -(-ocg // lanes) * lanes
    if groups == 1 or ocgp == ocg:
        return ocg
    return ocgp if ocg / ocgp > min(channel_block(ocg, lanes), lanes) / lanes else ocg


@dataclasses.dataclass(frozen=True)
class _Padded:
    """A tensor computed with padded groups: ``[..., groups * ocgp]`` of which each group's first ``ocg``
    (``var`` None: the padding an op's result will have, before it is emitted)."""

    var: relax.Var | None
    groups: int
    ocg: int
    ocgp: int


@relax.expr_functor.mutator
class _Rewriter(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, lanes: int):
        super().__init__(mod)
        self.lanes = lanes
        self.padded: dict[relax.Var, _Padded] = {}

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = binding.value
        made = None
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op):
            made = self.conv(value) if value.op.name == "relax.nn.conv2d" else self.elementwise(value)
        if made is None:
            super().visit_var_binding_(binding)
            return
        call, padding = made
        bb = self.builder_
        p = dataclasses.replace(padding, var=bb.emit(call, "nna_padded"))
        self.padded[binding.var] = p
        # binding.var: each group's own channels (unused where the next op takes the padded tensor)
        *lead, _ = binding.var.ty.shape.values
        split = bb.emit(relax.op.reshape(p.var, [*lead, p.groups, p.ocgp]), "nna_groups")
        own = bb.emit(relax.op.strided_slice(split, axes=[len(lead) + 1], begin=[0], end=[p.ocg]), "nna_own")
        bb.emit_normalized(
            relax.VarBinding(binding.var, bb.normalize(relax.op.reshape(own, [*lead, p.groups * p.ocg])))
        )

    def conv(self, call: relax.Call) -> tuple[relax.Expr, _Padded] | None:
        attrs = call.attrs
        x, w = call.args
        groups = int(attrs.groups)
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NHWC", "OIHW", "NHWC") or groups == 1:
            return None
        if not isinstance(w, tvm.ir.GenericConst) or w.ty.dtype != "float32" or x.ty.dtype != "float32":
            return None
        value = w.value.numpy()
        oc, icg = value.shape[:2]
        if icg == 1 or oc % groups:
            return None  # depthwise: its own kernel
        ocg = oc // groups
        ocgp = padded_group(oc, groups, self.lanes)
        if ocgp == ocg:
            return None
        weight = np.zeros((groups, ocgp, *value.shape[1:]), value.dtype)
        weight[:, :ocg] = value.reshape(groups, ocg, *value.shape[1:])
        weight = relax.const(weight.reshape(groups * ocgp, *value.shape[1:]))
        return relax.Call(call.op, [x, weight], attrs), _Padded(None, groups, ocg, ocgp)

    def elementwise(self, call: relax.Call) -> tuple[relax.Expr, _Padded] | None:
        name = call.op.name
        args = list(call.args)
        if name in _UNARY and args[0] in self.padded:
            p = self.padded[args[0]]
            return relax.Call(call.op, [p.var, *args[1:]], call.attrs), p
        if name not in _BINARY or len(args) != 2:
            return None
        for i in (0, 1):
            if args[i] not in self.padded:
                continue
            p, other = self.padded[args[i]], args[1 - i]
            shape = static_shape(other.ty)
            if shape is None or len(shape) > args[i].ty.ndim or any(d != 1 for d in shape[:-1]):
                return None  # not a per-channel operand
            if shape and shape[-1] == p.groups * p.ocg:
                other = self.pad_channels(other, p)
            elif shape and shape[-1] != 1:
                return None
            args[i], args[1 - i] = p.var, other
            return relax.Call(call.op, args, call.attrs), p
        return None

    def pad_channels(self, operand: relax.Expr, p: _Padded) -> relax.Expr:
        """A per-channel operand ``[1, ..., groups * ocg]`` for the padded channels (ones in the padding;
        a constant one is folded at compile time)."""
        bb, rank = self.builder_, operand.ty.ndim
        grouped = bb.emit(relax.op.reshape(operand, [1] * (rank - 1) + [p.groups, p.ocg]))
        widths = [0] * (2 * rank) + [0, p.ocgp - p.ocg]
        padded = bb.emit(relax.op.nn.pad(grouped, widths, pad_value=1.0))
        return bb.emit(relax.op.reshape(padded, [1] * (rank - 1) + [p.groups * p.ocgp]))


def pad_groups(lanes: int) -> tvm.transform.Pass:
    """A pass: every function's grouped convolutions with padded groups (the module docstring); the
    compactions an op after them took over are removed with the other unused bindings."""

    @relax.transform.function_pass(opt_level=0, name="nnadapter_tvm.PadGroups")
    def transform(func: relax.Function, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> relax.Function:
        rewriter = _Rewriter(mod, lanes)
        new = rewriter.visit_expr(func)
        return relax.analysis.remove_all_unused(new) if rewriter.padded else func

    return transform
