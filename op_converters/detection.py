"""Detection heads: PRIOR_BOX, YOLO_BOX and NON_MAX_SUPPRESSION, each as Paddle's CPU kernel of the same
name computes it (the spec leaves them loosely defined).

PRIOR_BOX depends only on shapes and becomes constants; YOLO_BOX composes Relax ops;
NON_MAX_SUPPRESSION is a sequential TIR kernel whose padded result is cut to its run-time length.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from tvm import relax, te, tirx

from nnadapter_tvm.op_converters.args import OpArgs
from nnadapter_tvm.op_converters.float32 import F32, f32, floats
from nnadapter_tvm.op_converters.helpers import rank4
from nnadapter_tvm.op_converters.registry import converter
from nnadapter_tvm.types import OperationType as O
from nnadapter_tvm.types import ResultCode

# -- PRIOR_BOX ------------------------------------------------------------------------


def _expand_aspect_ratios(ratios: list[float], flip: bool) -> list[float]:
    """1 first, then each new ratio (and 1 / ratio with flip); duplicates within 1e-6 dropped."""
    out = [1.0]
    for ar in ratios:
        if any(abs(ar - seen) < 1e-6 for seen in out):
            continue
        out.append(ar)
        if flip:
            out.append(1.0 / ar)
    return out


@converter(O.PRIOR_BOX)
def prior_box(args: OpArgs) -> relax.Expr:
    """input [N, C, H, W], image [N, C, H_img, W_img], min_sizes, max_sizes (or empty),
    aspect_ratios, variances [4], flip, clip, step_w, step_h (0: W_img / W, H_img / H), offset
    (default 0.5), min_max_aspect_ratios_order (default false) -> boxes, variances [H, W, P, 4].

    For cell (h, w), centre ((w + offset) * step_w, (h + offset) * step_h); per min size, the priors
    are [aspect ratios (1 first; 1/r added with flip), sqrt(min * max)] or, with
    min_max_aspect_ratios_order, [min (ratio 1), sqrt(min * max), other ratios]; each box is
    [(cx - bw/2) / W_img, (cy - bh/2) / H_img, (cx + bw/2) / W_img, (cy + bh/2) / H_img] with
    bw = size * sqrt(r), bh = size / sqrt(r), clipped to [0, 1] with clip.  Both outputs depend only
    on shapes, so they are computed at compile time as constants: H, W, H_img and W_img must be static.

    Reference: Paddle's paddle.vision.ops.prior_box (prior_box CPU kernel).
    """
    x, image = args.tensor("input"), args.tensor("image")
    _, _, height, width = rank4(args, x, "input")
    _, _, img_h, img_w = rank4(args, image, "image")
    for name, dims in (("input", (height, width)), ("image", (img_h, img_w))):
        if not all(isinstance(d, int) for d in dims):
            args.fail(
                "needs static height and width (the boxes are computed at compile time)",
                name,
                ResultCode.FEATURE_NOT_SUPPORTED,
            )
    min_sizes = floats(args, "min_sizes")
    max_sizes = floats(args, "max_sizes") if args.has("max_sizes") else []
    ratios = floats(args, "aspect_ratios") if args.has("aspect_ratios") else []
    variances = floats(args, "variances")
    flip, clip = args.bool("flip", False), args.bool("clip", False)
    step_w, step_h = args.float("step_w", 0.0), args.float("step_h", 0.0)
    offset = args.float("offset", 0.5)
    min_max_order = args.bool("min_max_aspect_ratios_order", False)
    if not min_sizes or any(s <= 0 for s in min_sizes):
        args.fail(f"must hold at least one positive size, got {min_sizes}", "min_sizes")
    if max_sizes and (len(max_sizes) != len(min_sizes) or any(b <= a for a, b in zip(min_sizes, max_sizes))):
        message = f"must be empty or hold one size per min size, each above it; min {min_sizes}, max {max_sizes}"
        args.fail(message, "max_sizes")
    if any(r <= 0 for r in ratios):
        args.fail(f"must be positive, got {ratios}", "aspect_ratios")
    if len(variances) != 4:
        args.fail(f"must hold 4 values, got {variances}", "variances")
    if step_w < 0 or step_h < 0:
        args.fail(f"steps must be non-negative (0: automatic), got {step_w}, {step_h}", "step_w")
    if step_w == 0 or step_h == 0:
        step_w, step_h = np.float32(img_w) / np.float32(width), np.float32(img_h) / np.float32(height)
    expanded = _expand_aspect_ratios(ratios, flip)
    half_sizes = []  # (half width, half height) of each prior of a cell, in output order
    for s, min_size in enumerate(min_sizes):
        shaped = [(min_size * math.sqrt(r) / 2, min_size / math.sqrt(r) / 2) for r in expanded]
        big = [(math.sqrt(min_size * max_sizes[s]) / 2,) * 2] if max_sizes else []
        if min_max_order:
            others = [hs for r, hs in zip(expanded, shaped) if abs(r - 1.0) >= 1e-6]
            half_sizes += [(min_size / 2, min_size / 2), *big, *others]
        else:
            half_sizes += [*shaped, *big]
    half = np.asarray(half_sizes, "float32")  # [P, 2]
    cx = (np.arange(width, dtype="float32") + np.float32(offset)) * np.float32(step_w)
    cy = (np.arange(height, dtype="float32") + np.float32(offset)) * np.float32(step_h)
    cx, cy = cx[None, :, None], cy[:, None, None]
    hw, hh = half[None, None, :, 0], half[None, None, :, 1]
    boxes = np.stack(
        np.broadcast_arrays(
            (cx - hw) / np.float32(img_w),
            (cy - hh) / np.float32(img_h),
            (cx + hw) / np.float32(img_w),
            (cy + hh) / np.float32(img_h),
        ),
        axis=-1,
    ).astype("float32")
    if clip:
        boxes = np.clip(boxes, 0, 1)
    var = np.broadcast_to(np.asarray(variances, "float32"), boxes.shape)
    return [relax.const(np.ascontiguousarray(boxes)), relax.const(np.ascontiguousarray(var))]


# -- YOLO_BOX -------------------------------------------------------------------------


@converter(O.YOLO_BOX)
def yolo_box(args: OpArgs) -> relax.Expr:
    """input [N, A * (5 + class_num), H, W] (iou_aware: [N, A * (6 + class_num), H, W], the A IoU
    channels first), imgsize [N, 2] (height, width), anchors [2A], class_num, conf_thresh,
    downsample_ratio, clip_bbox (default true), scale_x_y (default 1), iou_aware (default false),
    iou_aware_factor (default 0.5) -> boxes [N, A * H * W, 4], scores [N, A * H * W, class_num].

    Box (a, i, j) (row-major per anchor) decodes to centre ((j + sigmoid(tx) * s - (s - 1) / 2) *
    img_w / W, likewise y) and size (exp(tw) * anchor_w * img_w / (downsample_ratio * W), likewise h),
    as [x1, y1, x2, y2], clipped to [0, img_w - 1] x [0, img_h - 1] with clip_bbox; conf =
    sigmoid(obj) (iou_aware: conf^(1 - f) * sigmoid(iou)^f); scores = conf * sigmoid(class logits).
    Boxes and scores of a box with conf < conf_thresh are 0.

    Reference: Paddle's paddle.vision.ops.yolo_box (yolo_box CPU kernel).
    """
    x, imgsize = args.tensor("input"), args.raw_tensor("imgsize")
    n, channels, h, w = rank4(args, x, "input")
    anchors = args.ints("anchors")
    class_num = args.int("class_num")
    conf_thresh = args.float("conf_thresh")
    downsample = args.int("downsample_ratio")
    clip_bbox = args.bool("clip_bbox", True)
    scale_x_y = args.float("scale_x_y", 1.0)
    iou_aware = args.bool("iou_aware", False)
    iou_factor = args.float("iou_aware_factor", 0.5)
    if not anchors or len(anchors) % 2:
        args.fail(f"must hold (width, height) pairs, got {anchors}", "anchors")
    if class_num <= 0:
        args.fail(f"must be positive, got {class_num}", "class_num")
    if downsample <= 0:
        args.fail(f"must be positive, got {downsample}", "downsample_ratio")
    num_anchors = len(anchors) // 2
    per_anchor = 5 + class_num
    expected = num_anchors * (per_anchor + (1 if iou_aware else 0))
    if isinstance(channels, int) and channels != expected:
        what = "A * (6 + class_num)" if iou_aware else "A * (5 + class_num)"
        args.fail(f"has {channels} channels, expected {what} = {expected} for A = {num_anchors}", "input")
    if args.shape(imgsize)[1:] != [2] or len(args.shape(imgsize)) != 2:
        args.fail(f"must have shape [N, 2], got {args.shape(imgsize)}", "imgsize")
    if not all(isinstance(d, int) for d in (h, w)):
        args.fail("needs a static height and width", "input", ResultCode.FEATURE_NOT_SUPPORTED)

    op = relax.op
    emit = args.emit

    def const(v) -> relax.Expr:
        return relax.const(np.asarray(v, "float32"))

    def channel(t: relax.Expr, start: int, stop: int) -> relax.Expr:
        return emit(op.strided_slice(t, axes=[2], begin=[start], end=[stop]))

    iou = None
    if iou_aware:
        iou = emit(op.strided_slice(x, axes=[1], begin=[0], end=[num_anchors]))  # [N, A, H, W]
        x = emit(op.strided_slice(x, axes=[1], begin=[num_anchors], end=[num_anchors * (per_anchor + 1)]))
    p = emit(op.reshape(x, [n, num_anchors, per_anchor, h, w]))
    size = emit(op.astype(imgsize, F32))  # [N, 2]: height, width
    img_h = emit(op.reshape(op.strided_slice(size, axes=[1], begin=[0], end=[1]), [n, 1, 1, 1]))
    img_w = emit(op.reshape(op.strided_slice(size, axes=[1], begin=[1], end=[2]), [n, 1, 1, 1]))
    conf = emit(op.sigmoid(op.reshape(channel(p, 4, 5), [n, num_anchors, h, w])))
    if iou_aware:
        conf = emit(
            op.multiply(
                op.power(conf, const(1.0 - np.float32(iou_factor))),
                op.power(op.sigmoid(iou), const(iou_factor)),
            )
        )
    bias = -0.5 * (scale_x_y - 1.0)
    grid_x = const(np.arange(w, dtype="float32").reshape(1, 1, 1, w))
    grid_y = const(np.arange(h, dtype="float32").reshape(1, 1, h, 1))
    anchor_w = const(np.asarray(anchors[0::2], "float32").reshape(1, num_anchors, 1, 1))
    anchor_h = const(np.asarray(anchors[1::2], "float32").reshape(1, num_anchors, 1, 1))

    def part(k: int) -> relax.Expr:
        return emit(op.reshape(channel(p, k, k + 1), [n, num_anchors, h, w]))

    def centre(k: int, grid: relax.Expr, img: relax.Expr, cells: int) -> relax.Expr:
        offset = op.add(op.multiply(op.sigmoid(part(k)), const(scale_x_y)), const(bias))
        return emit(op.divide(op.multiply(op.add(grid, offset), img), const(float(cells))))

    def extent(k: int, anchor: relax.Expr, img: relax.Expr, input_size: int) -> relax.Expr:
        return emit(op.divide(op.multiply(op.multiply(op.exp(part(k)), anchor), img), const(float(input_size))))

    cx, cy = centre(0, grid_x, img_w, w), centre(1, grid_y, img_h, h)
    bw, bh = extent(2, anchor_w, img_w, downsample * w), extent(3, anchor_h, img_h, downsample * h)
    half_w, half_h = emit(op.divide(bw, const(2.0))), emit(op.divide(bh, const(2.0)))
    x1, y1 = op.subtract(cx, half_w), op.subtract(cy, half_h)
    x2, y2 = op.add(cx, half_w), op.add(cy, half_h)
    if clip_bbox:
        zero = const(0.0)
        x1, y1 = op.maximum(x1, zero), op.maximum(y1, zero)
        x2 = op.minimum(x2, op.subtract(img_w, const(1.0)))
        y2 = op.minimum(y2, op.subtract(img_h, const(1.0)))
    keep = emit(op.greater_equal(conf, const(conf_thresh)))  # [N, A, H, W]
    boxes = emit(op.stack([emit(v) for v in (x1, y1, x2, y2)], axis=4))  # [N, A, H, W, 4]
    boxes = op.where(op.expand_dims(keep, 4), boxes, const(0.0))
    boxes = op.reshape(boxes, [n, num_anchors * h * w, 4])
    classes = emit(op.sigmoid(channel(p, 5, per_anchor)))  # [N, A, C, H, W]
    scores = op.multiply(classes, op.expand_dims(conf, 2))
    scores = op.where(op.expand_dims(keep, 2), scores, const(0.0))
    scores = op.reshape(op.permute_dims(scores, [0, 1, 3, 4, 2]), [n, num_anchors * h * w, class_num])
    return [boxes, scores]


# -- NON_MAX_SUPPRESSION --------------------------------------------------------------


def _jaccard(box: Callable, a: tirx.PrimExpr, b: tirx.PrimExpr, normalized: bool) -> tirx.PrimExpr:
    """Paddle's JaccardOverlap of boxes ``a`` and ``b`` ([xmin, ymin, xmax, ymax]); +1 on sides unless normalized."""
    b1, b2 = [box(a, k) for k in range(4)], [box(b, k) for k in range(4)]
    norm = f32(0.0 if normalized else 1.0)

    def area(v):
        invalid = tirx.any(v[2] < v[0], v[3] < v[1])
        return tirx.Select(invalid, f32(0.0), (v[2] - v[0] + norm) * (v[3] - v[1] + norm))

    disjoint = tirx.any(b2[0] > b1[2], b2[2] < b1[0], b2[1] > b1[3], b2[3] < b1[1])
    inter_w = tirx.min(b1[2], b2[2]) - tirx.max(b1[0], b2[0]) + norm
    inter_h = tirx.min(b1[3], b2[3]) - tirx.max(b1[1], b2[1]) + norm
    inter = inter_w * inter_h
    return tirx.Select(disjoint, f32(0.0), inter / (area(b1) + area(b2) - inter))


def _nms_ir(ins, outs, *, background, score_threshold, limit, nms_threshold, eta, keep_top_k, normalized):
    """Paddle's MultiClassNMS for [N, M, 4] boxes and [N, C, M] scores, images one after another.

    ``order`` holds each (image, class)'s box indices by descending score (stable).  Kept rows are
    written, per image, by class then selection order, at the running offset ``total``.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    boxes, scores, order = ins
    out, index, counts, total, sel, cnt = outs
    num_images, num_boxes = boxes.shape[0], boxes.shape[1]
    num_classes = scores.shape[1]
    i64 = "int64"
    # One pass over a 1-trip loop: the kernel body is a sequence (T.seq_scope warns "unknown pragma").
    with IRBuilder() as ib, T.serial(0, 1):
        boxes, scores, order = T.buffer_proxy(boxes), T.buffer_proxy(scores), T.buffer_proxy(order)
        out, index, counts, total = (
            T.buffer_proxy(out),
            T.buffer_proxy(index),
            T.buffer_proxy(counts),
            T.buffer_proxy(total),
        )
        sel, cnt = T.buffer_proxy(sel), T.buffer_proxy(cnt)

        def local(dtype):
            return T.buffer_proxy(T.alloc_buffer((1,), dtype, scope="local"))

        written, rows, detections, rank, keep = local(i64), local(i64), local(i64), local(i64), local(i64)
        threshold = local(F32)
        written[0] = tirx.const(0, i64)
        with T.serial(0, num_images) as n:

            def box(i, k, n=n):
                return boxes[n, i, k]

            detections[0] = tirx.const(0, i64)
            with T.serial(0, num_classes) as c:
                cnt[n, c] = tirx.const(0, i64)
                with T.If(c != background), T.Then():
                    threshold[0] = f32(nms_threshold)
                    with T.serial(0, limit(num_boxes)) as k:
                        idx = order[n, c, k]
                        with T.If(scores[n, c, idx] > f32(score_threshold)), T.Then():
                            keep[0] = tirx.const(1, i64)
                            with T.serial(0, cnt[n, c]) as t:
                                overlap = _jaccard(box, idx, sel[n, c, t], normalized)
                                # Paddle keeps while overlap <= threshold (so NaN suppresses).
                                keep[0] = tirx.Select(overlap <= threshold[0], keep[0], tirx.const(0, i64))
                            with T.If(keep[0] == 1), T.Then():
                                sel[n, c, cnt[n, c]] = idx
                                cnt[n, c] = cnt[n, c] + 1
                                if eta < 1:
                                    with T.If(threshold[0] > f32(0.5)), T.Then():
                                        threshold[0] = threshold[0] * f32(eta)
                detections[0] = detections[0] + cnt[n, c]
            rows[0] = tirx.const(0, i64)
            with T.serial(0, num_classes) as c, T.serial(0, cnt[n, c]) as t:
                idx = sel[n, c, t]
                score = scores[n, c, idx]
                keep[0] = tirx.const(1, i64)
                if keep_top_k > -1:
                    # Keep the keep_top_k best of the image: rank by score, ties in (class, order).
                    with T.If(detections[0] > keep_top_k), T.Then():
                        rank[0] = tirx.const(0, i64)
                        with T.serial(0, num_classes) as c2, T.serial(0, cnt[n, c2]) as t2:
                            other = scores[n, c2, sel[n, c2, t2]]
                            before = tirx.any(c2 < c, tirx.all(c2 == c, t2 < t))
                            ahead = tirx.any(other > score, tirx.all(other == score, before))
                            rank[0] = rank[0] + ahead.astype(i64)
                        keep[0] = (rank[0] < keep_top_k).astype(i64)
                with T.If(keep[0] == 1), T.Then():
                    row = written[0] + rows[0]
                    out[row, 0] = c.astype(F32)
                    out[row, 1] = score
                    for k in range(4):
                        out[row, 2 + k] = boxes[n, idx, k]
                    index[row] = (n * num_boxes + idx).astype("int32")
                    rows[0] = rows[0] + 1
            counts[n] = rows[0].astype("int32")
            written[0] = written[0] + rows[0]
        total[0] = written[0]
    return ib.get()


@converter(O.NON_MAX_SUPPRESSION)
def non_max_suppression(args: OpArgs) -> relax.Expr:
    """bboxes [N, M, 4], scores [N, C, M], rois_num (must be empty), background_label, score_threshold,
    nms_top_k, nms_threshold, nms_eta, keep_top_k, normalized, return_index -> output [No, 6] rows
    (label, score, xmin, ymin, xmax, ymax), out_rois_num [N] (INT32), index [No] (INT32, n * M + box).

    Per image and class (but background_label), boxes scoring above score_threshold are taken by
    descending score (ties by index), at most nms_top_k (-1: all), and kept greedily while their
    Jaccard overlap with every kept box is <= the threshold, which starts at nms_threshold and is
    multiplied by nms_eta after each kept box while above 0.5 (eta < 1).  keep_top_k (-1: all) then
    keeps the best scores of the image.  Rows are ordered by image, class, then descending score.
    The row count No is known only at run time: a kernel fills padded buffers and a dynamic slice cuts
    them.  Only Paddle's 3-D case is supported (no ``rois_num``, 4 coordinates per box).  ``index``
    has shape [No] as NNAdapter's header says (Paddle's is [No, 1]).

    Reference: Paddle's multiclass_nms3 operator (CPU kernel); not in the spec, operands from the header.
    """
    boxes, scores = args.tensor("bboxes"), args.tensor("scores")
    box_shape, score_shape = args.shape(boxes), args.shape(scores)
    if args.has("rois_num"):
        message = "the 2-D (LoD) form with rois_num is not supported"
        args.fail(message, "rois_num", ResultCode.FEATURE_NOT_SUPPORTED)
    if len(box_shape) != 3:
        args.fail(f"must have shape [N, M, 4], got {box_shape}", "bboxes")
    if box_shape[2] in (8, 16, 24, 32):
        message = f"polygon boxes ({box_shape[2]} coordinates) are not supported"
        args.fail(message, "bboxes", ResultCode.FEATURE_NOT_SUPPORTED)
    if box_shape[2] != 4:
        args.fail(f"must have shape [N, M, 4], got {box_shape}", "bboxes")
    if len(score_shape) != 3:
        args.fail(f"must have shape [N, C, M], got {score_shape}", "scores")
    for axis, (a, b) in enumerate(((box_shape[0], score_shape[0]), (box_shape[1], score_shape[2]))):
        if isinstance(a, int) and isinstance(b, int) and a != b:
            what = "batch" if axis == 0 else "box count M"
            args.fail(f"{what} {b} differs from the boxes' {a} (bboxes {box_shape}, scores {score_shape})", "scores")
    background = args.int("background_label", 0)
    score_threshold = args.float("score_threshold")
    nms_top_k = args.int("nms_top_k", -1)
    nms_threshold = args.float("nms_threshold", 0.3)
    eta = args.float("nms_eta", 1.0)
    keep_top_k = args.int("keep_top_k", -1)
    normalized = args.bool("normalized", True)
    return_index = args.bool("return_index", False)
    if not eta > 0:
        args.fail(f"must be positive, got {eta}", "nms_eta")
    if return_index and args.output_count < 3:
        args.fail("is true but the operation has no 'index' output", "return_index")
    keep_top_k = keep_top_k if keep_top_k > -1 else -1

    def limit(num_boxes):
        return tirx.min(num_boxes, nms_top_k) if nms_top_k > -1 else num_boxes

    order = args.emit(relax.op.argsort(scores, axis=2, descending=True, dtype="int64"))

    def compute(b: te.Tensor, s: te.Tensor, o: te.Tensor) -> list[te.Tensor]:
        num_images, num_boxes = b.shape[0], b.shape[1]
        num_classes = s.shape[1]
        per_image = num_classes * limit(num_boxes)
        if keep_top_k > -1:
            per_image = tirx.min(per_image, keep_top_k)
        capacity = num_images * per_image
        shapes = [
            (capacity, 6),
            (capacity,),
            (num_images,),
            (1,),
            (num_images, num_classes, num_boxes),
            (num_images, num_classes),
        ]
        kernel = functools.partial(
            _nms_ir,
            background=background,
            score_threshold=score_threshold,
            limit=limit,
            nms_threshold=nms_threshold,
            eta=eta,
            keep_top_k=keep_top_k,
            normalized=normalized,
        )
        return te.extern(
            shapes,
            [b, s, o],
            kernel,
            dtype=[F32, "int32", "int32", "int64", "int64", "int64"],
            name="multiclass_nms",
        )

    result = args.emit_te(compute, boxes, scores, order)
    padded_out, padded_index, counts, total = (args.emit(relax.TupleGetItem(result, i)) for i in range(4))

    def i64(values) -> relax.Expr:
        return relax.const(np.asarray(values, "int64"), "int64")

    rows = tirx.Var("nms_rows", "int64")
    end = args.emit(relax.op.concat([total, i64([6])], axis=0))
    out = args.match_cast(
        args.emit(relax.op.dynamic_strided_slice(padded_out, i64([0, 0]), end, i64([1, 1]))), [rows, 6]
    )
    results = [out, counts]
    if args.output_count > 2:
        index = args.emit(relax.op.dynamic_strided_slice(padded_index, i64([0]), total, i64([1])))
        results.append(args.match_cast(index, [rows]))
    return results
