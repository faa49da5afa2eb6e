"""The model fuzzer's generator: a hypothesis strategy (``cases()``) that draws a JSON description of a
model, biased toward the operand table (``nnadapter_tvm.operations``): mostly the right operand counts
and precisions with random shapes (zero-sized, rank 0, huge, unknown) and attribute values (NaN, inf,
extremes), plus a fraction of deliberately wrong ones (unknown operation, wrong count, precision, byte
length, dtype, cycles...).  tests/fuzz_models.py runs what it draws.
"""

from __future__ import annotations

import numpy as np

# =================================================================================================
# The generator (hypothesis strategies)
# =================================================================================================
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
HUGE_DIMS = [1 << 16, 1 << 20, INT32_MAX, 1 << 40]
UNKNOWN = -65535
# Operand slots that carry data rather than attributes.
DATA_NAMES = {
    "input", "input0", "input1", "inputs", "x", "y", "condition", "filter", "weight", "offset", "mask",
    "grid", "rois", "bboxes", "scores", "image", "indices", "batch_indices",
}  # fmt: skip
# Operations on [N, C, H, W] (name fragments): their data input is drawn 4-D most of the time.
FOUR_D_OPS = ("POOL_2D", "CONV_2D", "RESIZE", "GRID_SAMPLE", "CHANNEL_SHUFFLE", "ROI_ALIGN", "LRN", "BATCH_NORM",
              "INSTANCE_NORM", "GROUP_NORM", "PRIOR_BOX", "YOLO_BOX")  # fmt: skip
CHANNEL_VECTORS = {"bias", "scale", "mean", "variance"}
ANY_PRECISIONS = [10, 10, 10, 5, 7, 0, 9, 1, 2, 11, 3]  # FLOAT32 (x3), INT32, INT64, BOOL8, FLOAT16, ...
WRONG_KINDS = [
    "op_type", "count", "precision", "byte_length", "value_dtype", "quant", "rank", "huge", "reuse",
    "attribute", "model", "feed", "properties",
]  # fmt: skip
FLOAT_SPECIALS = ["nan", "inf", "-inf", 0.0, -0.0, 1e-30, 3.4e38, -1.0]
INT_EXTREMES = [INT32_MIN, INT32_MAX, -1, 0, 1 << 20, -(1 << 20), 1 << 30]


def _strategies():
    """Build the strategies (hypothesis is imported here, so --run works without it)."""
    from hypothesis import strategies as st

    import nnadapter_tvm as nna
    from nnadapter_tvm import operations
    from nnadapter_tvm.model import assign_slots
    from nnadapter_tvm.types import QUANT_ASYMM, QUANT_PER_CHANNEL, is_quantized, storage_dtype

    P = nna.Precision
    # The enum's operations and the extensions versioned with the package (codes below 2000); the
    # built-in extensions from 2000 have their own op tests.
    table = {e.operation_type: e.schema for e in operations.entries() if e.code < 2000}
    op_types = sorted(table, key=int)
    valid_precisions = [int(p) for p in P]

    class Builder:
        def __init__(self, draw):
            self.draw = draw
            # One case in five is deliberately wrong, in one way (at one or more places).
            self.wrong_kind = self.pick(WRONG_KINDS) if self.chance(20) else None
            self.operands: list[dict] = []
            self.operations: list[dict] = []
            self.inputs: list[int] = []
            self.feeds: list[dict] = []
            self.produced: list[int] = []  # op outputs, in order
            self.consumed: set[int] = set()

        # -- small draws ----------------------------------------------------------------------
        def chance(self, percent: int) -> bool:
            return self.draw(st.integers(0, 99)) < percent

        def wrong(self, kind: str, percent: int = 50) -> bool:
            """Whether to make this place wrong (only in a case drawn wrong in this way)."""
            return self.wrong_kind == kind and self.chance(percent)

        def pick(self, items):
            return self.draw(st.sampled_from(list(items)))

        def int_(self, lo: int, hi: int) -> int:
            return self.draw(st.integers(lo, hi))

        def dim(self, allow_unknown: bool) -> int:
            roll = self.int_(0, 99)
            if roll < 2:
                return 0
            if roll < 7 and allow_unknown:
                return UNKNOWN
            if self.wrong("huge", 20):
                return self.pick(HUGE_DIMS)
            return self.int_(1, 5)

        def dims(self, allow_unknown: bool = False, rank: int | None = None) -> list[int]:
            if rank is None:
                rank = self.pick([0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 4, 5]) if not self.wrong("rank", 20) else 9
            return [self.dim(allow_unknown) for _ in range(rank)]

        def float_values(self, n: int) -> list:
            if self.chance(15):
                return [self.pick(FLOAT_SPECIALS) if self.chance(50) else self._float() for _ in range(n)]
            return [self._float() for _ in range(n)]

        def _float(self) -> float:
            return round(self.draw(st.floats(-4, 4, allow_nan=False)), 3)

        def int_values(self, n: int, lo: int = -2, hi: int = 5) -> list[int]:
            extreme = self.chance(8)
            return [self.pick(INT_EXTREMES) if extreme and self.chance(40) else self.int_(lo, hi) for _ in range(n)]

        # -- operands -------------------------------------------------------------------------
        def quant_params(self, precision: int, dims: list[int]) -> dict:
            if not is_quantized(precision):
                return {}
            wrong = self.wrong("quant")
            if precision in QUANT_PER_CHANNEL:
                axis = self.int_(0, max(len(dims) - 1, 0))
                channels = dims[axis] if dims and dims[axis] not in (UNKNOWN,) and dims[axis] <= 64 else 1
                count = channels + (self.int_(-1, 1) if wrong else 0)
                return {
                    "scale": [round(0.01 * self.int_(1, 100), 3) for _ in range(max(count, 0))],
                    "channel_dim": axis,
                }
            params = {"scale": self.pick([0.0, -1.0, None]) if wrong else round(0.005 * self.int_(1, 200), 4)}
            if precision in QUANT_ASYMM:
                params["zero_point"] = self.int_(0, 255) if not wrong else self.int_(-300, 300)
            return params

        def add_operand(self, precision: int, dims: list[int], value: dict | None = None) -> int:
            od = {"precision": precision, "dims": dims, **self.quant_params(precision, dims)}
            if value is not None:
                od["value"] = value
                if self.chance(10):
                    od["copy"] = False
            self.operands.append(od)
            return len(self.operands) - 1

        def model_input(self, precision: int, dims: list[int]) -> int:
            index = self.add_operand(precision, dims)
            self.inputs.append(index)
            feed = {"seed": self.int_(0, 1000)}
            if UNKNOWN in dims:
                feed["dims"] = [self.int_(0, 4) if d == UNKNOWN else d for d in dims]
            if self.chance(10):
                feed["special"] = True
            if self.wrong("feed"):  # another rank or dtype
                if self.chance(50):
                    feed["dims"] = [*dims, 2] if UNKNOWN not in dims else [2]
                else:
                    feed["dtype"] = self.pick(["float64", "int32", "uint8"])
            if precision in valid_precisions and storage_dtype(precision) in ("int32", "int64"):
                feed["low"], feed["high"] = -3, 6
            self.feeds.append(feed)
            return index

        def constant(self, precision: int, dims: list[int]) -> int:
            dims = [1 if d == UNKNOWN else d for d in dims]
            count = int(np.prod(dims, dtype=object)) if dims else 1
            if count > (1 << 22):  # no huge constants (the value itself would be huge)
                dims, count = [1], 1
            dtype = storage_dtype(precision) if precision in valid_precisions else "float32"
            value: dict
            if self.wrong("byte_length", 30):
                value = {"bytes": max(0, count * np.dtype(dtype).itemsize + self.pick([-1, 1, -4, 4, 100]))}
            elif count <= 16:
                if np.dtype(dtype).kind == "f":
                    data = self.float_values(count)
                elif np.dtype(dtype).kind == "b":
                    data = [self.int_(0, 1) for _ in range(count)]
                elif is_quantized(precision) or np.dtype(dtype).itemsize < 4:
                    info = np.iinfo(dtype)
                    data = [self.int_(max(info.min, -20), min(info.max, 20)) for _ in range(count)]
                else:
                    data = self.int_values(count)
                value = {"data": data}
            else:
                value = {"seed": self.int_(0, 1000)}
                if np.dtype(dtype).kind in "iu" and not is_quantized(precision):
                    value.update(low=-3, high=6)
            if self.wrong("value_dtype", 30):  # a value of another dtype than the operand's
                value["dtype"] = self.pick(["float64", "int16", "int64", "float32"])
            return self.add_operand(precision, dims, value)

        def attribute(self, name: str, precision: int, base: list[int], op) -> int:
            """A constant attribute, shaped and valued after its name."""
            rank = len(base)
            kind = np.dtype(storage_dtype(precision)).kind if precision in valid_precisions else "f"
            if kind == "f":
                if name == "scales":
                    n = self.pick([2, 2, 4, 1, 0])
                    return self._const_data(precision, [n], [round(0.5 * self.int_(1, 6), 2) for _ in range(n)])
                n = 1 if not self.chance(10) else self.int_(0, 4)
                return self._const_data(precision, [n] if not self.chance(10) else [], self.float_values(n))
            if kind == "b":
                return self._const_data(precision, [1], [self.int_(0, 1)])
            # integers
            if name in ("axes",):
                n = self.int_(0, max(rank, 1))
                values = [self.int_(-rank - 1, max(rank, 1)) for _ in range(n)]
            elif name == "perm":
                values = list(self.draw(st.permutations(range(rank)))) if not self.chance(15) else self.int_values(rank)
            elif name in ("shape", "output_shape"):
                n = self.int_(1, 4) if name == "shape" else 2
                values = [self.pick([-1, 0, 1, 2, 3, 4, 6]) for _ in range(n)]
                if self.chance(10):
                    values = self.int_values(n)
            elif name in ("pads",):
                n = self.pick([4, 4, 4, 2, 0, 2 * rank])
                values = [self.int_(0, 2) for _ in range(n)]
            elif name in ("strides", "dilations", "kernel_shape", "output_padding"):
                lo = 0 if name == "output_padding" else 1
                values = [self.int_(lo, 3) for _ in range(self.pick([2, 2, 1, 3]))]
            elif name in ("repeats",):
                values = [self.int_(1, 3) for _ in range(rank)]
            elif name in ("starts", "ends", "steps", "shifts"):
                values = self.int_values(self.int_(1, max(rank, 1)), -4, 5)
            elif name in ("split",):
                values = [self.int_(0, 3) for _ in range(self.int_(1, 3))]
            elif name in ("dtype", "return_indices_dtype"):
                values = [self.pick([5, 7, 5, 7, 10, 0, 1, 2, 3, 9, 11, 24, 99, -1])]
            elif name == "fuse_code":
                values = [self.pick([0, 0, 1, 2, 3, 4, -1])]
            elif name == "auto_pad":
                values = [self.pick([0, 0, 1, 2, 3])]
            elif name in ("group", "groups", "deformable_group"):
                values = [self.pick([1, 1, 2, base[1] if rank > 1 and 0 < base[1] < 64 else 1, 0, -1])]
            elif name in ("axis", "begin_norm_axis", "start_axis", "end_axis"):
                values = [self.int_(-rank - 1, max(rank, 1))]
            elif name == "k":
                values = [self.int_(0, 4)]
            else:
                values = self.int_values(1)
            shape = [len(values)]
            if len(values) == 1 and self.chance(10):
                shape = []
            return self._const_data(precision, shape, values)

        def _const_data(self, precision: int, dims: list[int], data: list) -> int:
            if self.wrong("byte_length", 30):
                dims = [len(data) + 1]
            return self.add_operand(precision, dims, {"data": data})

        # -- one operation --------------------------------------------------------------------
        def operation(self) -> None:
            op_type = self.pick(op_types)
            schema = table[op_type]
            type_value = int(op_type)
            if self.wrong("op_type"):
                type_value = self.pick([-1, 96, 97, 200, INT32_MAX])
            count = self._count(schema.inputs)
            try:
                slots = [a for _, a in assign_slots(op_type.name, "input", schema.inputs, count)]
            except nna.NNAdapterError:
                slots = [schema.inputs[i % len(schema.inputs)] for i in range(count)]
            four_d = any(part in op_type.name for part in FOUR_D_OPS)
            base = self.dims(allow_unknown=True, rank=4 if four_d and self.chance(85) else None)
            chosen: dict[str, int] = {}
            inputs: list[int] = []
            dims_of: dict[str, list[int]] = {}
            for pos, arg in enumerate(slots):
                precision = self._precision(arg, chosen)
                chosen.setdefault(arg.name, precision)
                inputs.append(self._input(pos, arg, precision, base, dims_of, op_type))
            out_slots = self._out_slots(schema)
            outputs = []
            first_precision = chosen.get(slots[0].name) if slots else None
            for arg in out_slots:
                allowed = [int(p) for p in arg.precisions] or ANY_PRECISIONS
                keep = first_precision in allowed and self.chance(80)
                precision = first_precision if keep else self.pick(allowed)
                if self.wrong("precision", 20):
                    precision = self.pick(valid_precisions)
                outputs.append(self.add_operand(precision, self._out_dims()))
            if self.wrong("reuse") and self.produced:
                outputs[0] = self.pick(self.produced)  # an operand already produced (or a cycle)
            elif self.wrong("reuse") and inputs:
                outputs[-1] = self.pick(inputs)  # an output that is also an input
            self.operations.append({"type": type_value, "inputs": inputs, "outputs": outputs})
            self.produced.extend(outputs)

        def _count(self, args) -> int:
            required = [a for a in args if not a.optional]
            if any(a.variadic for a in args):
                count = len(args) - 1 + self.int_(1, 4)
                count -= sum(1 for a in args if a.optional) if self.chance(50) else 0
            else:
                count = self.int_(len(required), len(args))
            if self.wrong("count"):
                count = max(0, count + self.pick([-2, -1, 1, 2]))
            return count

        def _precision(self, arg, chosen: dict[str, int]) -> int:
            if self.wrong("precision", 20):
                return self.pick([*valid_precisions, 12, 99])
            if arg.same_as and arg.same_as in chosen and self.chance(95):
                return chosen[arg.same_as]
            return self.pick([int(p) for p in arg.precisions] or ANY_PRECISIONS)

        def _input(self, pos: int, arg, precision: int, base: list[int], dims_of: dict, op_type) -> int:
            name = arg.name
            is_data = pos == 0 or name in DATA_NAMES or (name == "alpha" and op_type == nna.OperationType.PRELU)
            if is_data:
                candidates = [o for o in self.produced if self.operands[o]["precision"] == precision]
                if candidates and self.chance(60):
                    chosen = self.pick(candidates)
                    self.consumed.add(chosen)
                    return chosen
                dims = self._data_dims(name, base, dims_of)
                dims_of.setdefault(name, dims)
                if self.chance(65 if pos == 0 else 40):
                    return self.model_input(precision, dims)
                return self.constant(precision, dims)
            if name in CHANNEL_VECTORS and self.chance(70):
                channels = base[1] if len(base) > 1 else 1
                if name == "bias" and "filter" in dims_of and dims_of["filter"]:
                    channels = dims_of["filter"][0]
                if name == "bias" and "weight" in dims_of and dims_of["weight"]:
                    channels = dims_of["weight"][0]
                return self.constant(precision, [channels if channels != UNKNOWN else 1])
            if self.wrong("attribute", 30):  # an attribute that is not a constant
                return self.model_input(precision, [1])
            if self.wrong("attribute", 30):  # an attribute shaped like a tensor
                return self.constant(precision, self.dims())
            return self.attribute(name, precision, [1 if d == UNKNOWN else d for d in base], op_type)

        def _data_dims(self, name: str, base: list[int], dims_of: dict) -> list[int]:
            rank = len(base)
            channels = base[1] if rank > 1 and base[1] != UNKNOWN else 2
            roll = self.int_(0, 99)
            if name == "filter" and roll < 70:
                return [self.int_(1, 4), max(1, channels), self.int_(1, 3), self.int_(1, 3)]
            if name == "weight" and roll < 70:
                return [self.int_(1, 4), base[-1] if rank and base[-1] != UNKNOWN else 3]
            if name == "y" and "x" in dims_of and roll < 60:
                x = dims_of["x"]
                return [*x[:-2], x[-1], self.int_(1, 4)] if len(x) >= 2 else list(x)
            if roll < 60:
                return list(base)
            if roll < 75 and rank:
                return base[self.int_(0, rank) :]
            if roll < 85 and rank > 1:
                return [base[1]]
            return self.dims(allow_unknown=True)

        def _out_slots(self, schema) -> list:
            slots = []
            for arg in schema.outputs:
                if arg.variadic:
                    slots.extend([arg] * self.int_(1, 4))
                elif not arg.optional or self.chance(50):
                    slots.append(arg)
            if self.wrong("count"):
                slots = slots[:-1] if self.chance(50) else [*slots, schema.outputs[-1]]
            return slots or [schema.outputs[0]]

        def _out_dims(self) -> list[int]:
            roll = self.int_(0, 99)
            if roll < 80:
                return []  # not declared: the compiler infers (rank 0 declared checks nothing)
            if roll < 90:
                return [UNKNOWN] * self.int_(1, 4)
            return self.dims()

        # -- the model ------------------------------------------------------------------------
        def case(self) -> dict:
            for _ in range(self.pick([1, 1, 1, 1, 2, 2, 3])):
                self.operation()
            outputs = [o for o in self.produced if o not in self.consumed]
            outputs += [o for o in self.produced if o in self.consumed and self.chance(20)]
            outputs = list(dict.fromkeys(outputs))
            inputs = list(self.inputs)
            if self.wrong("model", 100):
                roll = self.int_(0, 4)
                if roll == 0:
                    outputs = []
                elif roll == 1 and inputs:
                    inputs.append(inputs[0])
                elif roll == 2 and inputs:
                    inputs.pop()  # an operand used but never defined
                elif roll == 3:
                    outputs.append(len(self.operands) - 1)
                else:
                    consts = [i for i, o in enumerate(self.operands) if "value" in o]
                    if consts:
                        inputs.append(consts[0])
            case = {"operands": self.operands, "operations": self.operations, "inputs": inputs, "outputs": outputs}
            case["feeds"] = [self.feeds[self.inputs.index(i)] if i in self.inputs else {} for i in inputs]
            if self.wrong("properties", 100):
                case["properties"] = self.pick(["TVM_OPT_LEVEL=9;", "BOGUS=1;", "TVM_OPT_LEVEL=x;", "LLVM_MCPU=;"])
            elif self.chance(10):
                case["properties"] = self.pick(["TVM_OPT_LEVEL=0;", "TVM_OPT_LEVEL=1;", "TVM_OPT_LEVEL=2;"])
            return case

    @st.composite
    def cases(draw) -> dict:
        return Builder(draw).case()

    return cases()


def cases():
    return _strategies()
