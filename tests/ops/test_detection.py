"""PRIOR_BOX, YOLO_BOX and NON_MAX_SUPPRESSION against numpy references written with explicit loops
from Paddle's CPU kernels (the spec leaves these operations to Paddle's operators of the same name),
their arithmetic in float32 as Paddle does it.  The references were checked once, outside this suite,
against paddlepaddle 3.3.1 on every case below.
"""

import math

import numpy as np
import pytest
from oputil import (
    UNKNOWN,
    Const,
    In,
    Out,
    P,
    b8,
    check_op,
    expect_error,
    f32,
    i32,
    rand,
    run_op,
)

import nnadapter_tvm as nna

OP = nna.OperationType
F = np.float32
EXACT = {"rtol": 0, "atol": 0}
EMPTY_F32 = Const(None, P.FLOAT32)
EMPTY_I32 = Const(None, P.INT32)


def run(op, inputs, shapes):
    return run_op(op, inputs, [Out() for _ in shapes], shapes)


# -- PRIOR_BOX ------------------------------------------------------------------------------


def prior_box_ref(feat_hw, img_hw, min_sizes, max_sizes, ratios, variances, flip, clip, steps, offset, mm_order):
    """Paddle's prior_box CPU kernel, one cell at a time."""
    height, width = feat_hw
    img_h, img_w = img_hw
    expanded = [1.0]
    for ar in ratios:
        if all(abs(ar - e) >= 1e-6 for e in expanded):
            expanded.append(ar)
            if flip:
                expanded.append(1.0 / ar)
    step_w, step_h = steps
    if step_w == 0 or step_h == 0:
        step_w, step_h = img_w / width, img_h / height
    cells = []
    for h in range(height):
        row = []
        for w in range(width):
            cx, cy = (w + offset) * step_w, (h + offset) * step_h
            priors = []

            def box(half_w, half_h, cx=cx, cy=cy, priors=priors):
                priors.append(
                    [(cx - half_w) / img_w, (cy - half_h) / img_h, (cx + half_w) / img_w, (cy + half_h) / img_h]
                )

            for s, min_size in enumerate(min_sizes):
                if mm_order:
                    box(min_size / 2, min_size / 2)
                    if max_sizes:
                        box(*[math.sqrt(min_size * max_sizes[s]) / 2] * 2)
                    for ar in expanded:
                        if abs(ar - 1.0) >= 1e-6:
                            box(min_size * math.sqrt(ar) / 2, min_size / math.sqrt(ar) / 2)
                else:
                    for ar in expanded:
                        box(min_size * math.sqrt(ar) / 2, min_size / math.sqrt(ar) / 2)
                    if max_sizes:
                        box(*[math.sqrt(min_size * max_sizes[s]) / 2] * 2)
            row.append(priors)
        cells.append(row)
    boxes = np.array(cells, "float64")
    if clip:
        boxes = np.clip(boxes, 0, 1)
    return boxes.astype(F), np.broadcast_to(np.array(variances, F), boxes.shape).copy()


def prior_inputs(feat, img, min_sizes, max_sizes, ratios, variances, flip, clip, steps, offset, mm_order):
    inputs = [
        In(feat),
        In(img),
        f32(min_sizes),
        f32(max_sizes) if max_sizes else EMPTY_F32,
        f32(ratios),
        f32(variances),
        b8([flip]),
        b8([clip]),
        f32([steps[0]]),
        f32([steps[1]]),
    ]
    if offset is not None:
        inputs.append(f32([offset]))
    if mm_order is not None:
        inputs.append(b8([mm_order]))
    return inputs


VARIANCES = [0.1, 0.1, 0.2, 0.2]
# (min_sizes, max_sizes, aspect_ratios, flip, clip, (step_w, step_h), offset, min_max_aspect_ratios_order);
# None for offset/order leaves the operand out (defaults 0.5 and false).  2.0 is repeated and 1.0 listed
# so that the duplicate removal shows.
PRIORS = {
    "defaults": ([4.0], [], [2.0], False, False, (0.0, 0.0), None, None),
    "flip_clip_max": ([4.0, 8.0], [6.0, 12.0], [2.0, 1.0, 2.0, 3.0], True, True, (0.0, 0.0), 0.5, False),
    "caffe_order": ([4.0, 8.0], [6.0, 12.0], [2.0, 3.0], True, False, (0.0, 0.0), 0.5, True),
    "explicit_steps": ([3.5], [7.0], [0.5], False, True, (3.0, 4.0), 0.3, True),
}


@pytest.mark.parametrize("case", list(PRIORS.values()), ids=list(PRIORS))
def test_prior_box(case):
    min_sizes, max_sizes, ratios, flip, clip, steps, offset, mm_order = case
    feat, img = rand(1, 2, 3, 4, seed=30), rand(1, 3, 12, 20, seed=31)
    expected = prior_box_ref(
        (3, 4),
        (12, 20),
        min_sizes,
        max_sizes,
        ratios,
        VARIANCES,
        flip,
        clip,
        steps,
        0.5 if offset is None else offset,
        bool(mm_order),
    )
    inputs = prior_inputs(feat, img, min_sizes, max_sizes, ratios, VARIANCES, flip, clip, steps, offset, mm_order)
    # Coordinates in [-1, 2] computed in float32 by both sides, in a slightly different order: 1e-6.
    check_op(OP.PRIOR_BOX, inputs, list(expected), rtol=1e-6, atol=1e-6)


PRIOR_ERRORS = {
    "three_variances": ([4.0], [], [0.1, 0.1, 0.2], "'variances'"),
    "max_below_min": ([4.0], [3.0], VARIANCES, "'max_sizes'"),
    "max_count": ([4.0, 5.0], [6.0], VARIANCES, "'max_sizes'"),
    "zero_min": ([0.0], [], VARIANCES, "'min_sizes'"),
}


@pytest.mark.parametrize("case", list(PRIOR_ERRORS.values()), ids=list(PRIOR_ERRORS))
def test_prior_box_invalid(case):
    min_sizes, max_sizes, variances, operand = case
    inputs = prior_inputs(
        rand(1, 2, 3, 4),
        rand(1, 3, 12, 20),
        min_sizes,
        max_sizes,
        [2.0],
        variances,
        False,
        False,
        (0.0, 0.0),
        None,
        None,
    )
    expect_error(lambda: run(OP.PRIOR_BOX, inputs, [(3, 4, 2, 4)] * 2), "PRIOR_BOX", operand)


def test_prior_box_needs_static_feature_size():
    inputs = prior_inputs(
        rand(1, 2, 3, 4), rand(1, 3, 12, 20), [4.0], [], [2.0], VARIANCES, False, False, (0.0, 0.0), None, None
    )
    inputs[0] = In(inputs[0].value, dims=[1, 2, UNKNOWN, 4])
    outputs = [Out(dims=[UNKNOWN, 4, 2, 4]), Out(dims=[UNKNOWN, 4, 2, 4])]
    expect_error(
        lambda: run_op(OP.PRIOR_BOX, inputs, outputs, [(3, 4, 2, 4)] * 2),
        "PRIOR_BOX",
        "'input'",
        code=nna.ResultCode.FEATURE_NOT_SUPPORTED,
    )


# -- YOLO_BOX -------------------------------------------------------------------------------


def sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def yolo_box_ref(x, imgsize, anchors, class_num, conf_thresh, downsample, clip_bbox, scale_x_y, iou_aware, iou_f):
    """Paddle's yolo_box CPU kernel: boxes and scores stay 0 where conf < conf_thresh."""
    n, _, h, w = x.shape
    num_anchors = len(anchors) // 2
    boxes = np.zeros((n, num_anchors * h * w, 4))
    scores = np.zeros((n, num_anchors * h * w, class_num))
    bias = -0.5 * (scale_x_y - 1.0)
    for b in range(n):
        img_h, img_w = imgsize[b]
        base = num_anchors if iou_aware else 0  # the IoU channels come first
        for a in range(num_anchors):
            ch = base + a * (5 + class_num)
            for i in range(h):
                for j in range(w):
                    conf = sigmoid(x[b, ch + 4, i, j])
                    if iou_aware:
                        conf = conf ** (1 - iou_f) * sigmoid(x[b, a, i, j]) ** iou_f
                    if conf < conf_thresh:
                        continue
                    cx = (j + sigmoid(x[b, ch, i, j]) * scale_x_y + bias) * img_w / w
                    cy = (i + sigmoid(x[b, ch + 1, i, j]) * scale_x_y + bias) * img_h / h
                    bw = math.exp(x[b, ch + 2, i, j]) * anchors[2 * a] * img_w / (downsample * w)
                    bh = math.exp(x[b, ch + 3, i, j]) * anchors[2 * a + 1] * img_h / (downsample * h)
                    box = [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]
                    if clip_bbox:
                        box = [max(box[0], 0), max(box[1], 0), min(box[2], img_w - 1), min(box[3], img_h - 1)]
                    k = a * h * w + i * w + j
                    boxes[b, k] = box
                    scores[b, k] = [conf * sigmoid(x[b, ch + 5 + c, i, j]) for c in range(class_num)]
    return boxes.astype(F), scores.astype(F)


def yolo_inputs(x, imgsize, anchors, class_num, conf, down, clip_bbox, scale_x_y, iou_aware, iou_f):
    return [
        In(x),
        In(imgsize, P.INT32),
        i32(anchors),
        i32([class_num]),
        f32([conf]),
        i32([down]),
        b8([clip_bbox]),
        f32([scale_x_y]),
        b8([iou_aware]),
        f32([iou_f]),
    ]


ANCHORS = [10, 13, 16, 30]
IMGSIZE = np.array([[40, 56], [33, 21]], "int32")
# (class_num, conf_thresh, clip_bbox, scale_x_y, iou_aware, iou_aware_factor)
YOLOS = {
    "plain": (3, 0.3, True, 1.0, False, 0.5),
    "no_clip_scaled": (2, 0.5, False, 1.2, False, 0.5),
    "iou_aware": (1, 0.4, True, 1.05, True, 0.3),
    "keep_all": (2, 0.0, True, 1.0, True, 0.5),
}


@pytest.mark.parametrize("case", list(YOLOS.values()), ids=list(YOLOS))
def test_yolo_box(case):
    class_num, conf, clip_bbox, scale_x_y, iou_aware, iou_f = case
    channels = 2 * (5 + class_num + (1 if iou_aware else 0))
    x = rand(2, channels, 3, 4, seed=40, low=-3, high=3)
    expected = yolo_box_ref(x, IMGSIZE, ANCHORS, class_num, conf, 8, clip_bbox, scale_x_y, iou_aware, iou_f)
    inputs = yolo_inputs(x, IMGSIZE, ANCHORS, class_num, conf, 8, clip_bbox, scale_x_y, iou_aware, iou_f)
    # Pixel coordinates up to ~100 from exp/sigmoid in float32 against a float64 reference: ~1e-5 relative.
    check_op(OP.YOLO_BOX, inputs, list(expected), rtol=1e-5, atol=1e-4)


def test_yolo_box_unknown_batch_and_empty_defaults():
    # Empty clip_bbox / scale_x_y / iou_aware / iou_aware_factor take the header's defaults (true, 1, false, 0.5).
    x = rand(2, 2 * 7, 2, 3, seed=41, low=-3, high=3)
    expected = yolo_box_ref(x, IMGSIZE, ANCHORS, 2, 0.3, 16, True, 1.0, False, 0.5)
    inputs = yolo_inputs(x, IMGSIZE, ANCHORS, 2, 0.3, 16, True, 1.0, False, 0.5)
    inputs[0] = In(x, dims=[UNKNOWN, 14, 2, 3])
    inputs[1] = In(IMGSIZE, P.INT32, dims=[UNKNOWN, 2])
    inputs[6:] = [Const(None, P.BOOL8), EMPTY_F32, Const(None, P.BOOL8), EMPTY_F32]
    outputs = [Out(dims=[UNKNOWN, 12, 4]), Out(dims=[UNKNOWN, 12, 2])]
    check_op(OP.YOLO_BOX, inputs, list(expected), outputs=outputs, rtol=1e-5, atol=1e-4)


YOLO_ERRORS = {
    "channels": (15, ANCHORS, 2, 8, "'input'"),
    "odd_anchors": (14, [10, 13, 16], 2, 8, "'anchors'"),
    "class_num": (14, ANCHORS, 0, 8, "'class_num'"),
    "downsample": (14, ANCHORS, 2, 0, "'downsample_ratio'"),
}


@pytest.mark.parametrize("case", list(YOLO_ERRORS.values()), ids=list(YOLO_ERRORS))
def test_yolo_box_invalid(case):
    channels, anchors, class_num, down, operand = case
    inputs = yolo_inputs(rand(2, channels, 2, 2), IMGSIZE, anchors, class_num, 0.3, down, True, 1.0, False, 0.5)
    expect_error(lambda: run(OP.YOLO_BOX, inputs, [(2, 8, 4), (2, 8, 2)]), "YOLO_BOX", operand)


# -- NON_MAX_SUPPRESSION --------------------------------------------------------------------


def jaccard(b1, b2, normalized):
    """Paddle's JaccardOverlap: 0 for disjoint boxes; +1 on each side unless normalized."""
    if b2[0] > b1[2] or b2[2] < b1[0] or b2[1] > b1[3] or b2[3] < b1[1]:
        return F(0)
    norm = F(0 if normalized else 1)

    def area(b):
        return F(0) if b[2] < b[0] or b[3] < b[1] else (b[2] - b[0] + norm) * (b[3] - b[1] + norm)

    inter = (min(b1[2], b2[2]) - max(b1[0], b2[0]) + norm) * (min(b1[3], b2[3]) - max(b1[1], b2[1]) + norm)
    return inter / (area(b1) + area(b2) - inter)


def nms_ref(boxes, scores, background, score_thr, nms_top_k, nms_thr, eta, keep_top_k, normalized):
    """Paddle's multiclass_nms3 (3-D case): rows [label, score, box], counts per image, index n * M + box."""
    num_images, num_classes, m = scores.shape
    rows, index, counts = [], [], []
    for n in range(num_images):
        selected = {}
        for c in range(num_classes):
            if c == background:
                continue
            candidates = [(scores[n, c, i], i) for i in range(m) if scores[n, c, i] > score_thr]
            candidates.sort(key=lambda p: -p[0])  # stable: ties keep index order
            if nms_top_k > -1:
                candidates = candidates[:nms_top_k]
            kept, thr = [], F(nms_thr)
            for _, i in candidates:
                if all(jaccard(boxes[n, i], boxes[n, j], normalized) <= thr for j in kept):
                    kept.append(i)
                    if eta < 1 and thr > 0.5:
                        thr = F(thr * F(eta))
            selected[c] = kept
        if keep_top_k > -1 and sum(len(v) for v in selected.values()) > keep_top_k:
            pairs = [(scores[n, c, i], c, i) for c in sorted(selected) for i in selected[c]]
            pairs.sort(key=lambda p: -p[0])
            selected = {}
            for _, c, i in pairs[:keep_top_k]:
                selected.setdefault(c, []).append(i)
        count = 0
        for c in sorted(selected):
            for i in selected[c]:
                rows.append([c, scores[n, c, i], *boxes[n, i]])
                index.append(n * m + i)
                count += 1
        counts.append(count)
    return np.array(rows, F).reshape(-1, 6), np.array(counts, "int32"), np.array(index, "int32")


def nms_data(n, m, c, seed, pixels=False, ties=False):
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 1, (n, m, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(0.05, 0.6, (n, m, 2))], -1).astype(F)
    scores = rng.uniform(0, 1, (n, c, m)).astype(F)
    if ties:
        scores = (np.round(scores * 4) / 4).astype(F)
    return boxes * F(20) if pixels else boxes, scores


def nms_inputs(boxes, scores, bg, score_thr, top_k, nms_thr, eta, keep, normalized, return_index=True, dims=None):
    return [
        In(boxes, dims=dims and dims[0]),
        In(scores, dims=dims and dims[1]),
        EMPTY_I32,
        i32([bg]),
        f32([score_thr]),
        i32([top_k]),
        f32([nms_thr]),
        f32([eta]),
        i32([keep]),
        b8([normalized]),
        b8([return_index]),
    ]


NMS_OUTS = [Out(dims=[UNKNOWN, 6]), Out(P.INT32), Out(P.INT32, dims=[UNKNOWN])]
# (N, M, C, data seed, pixel boxes, tied scores), (background, score_threshold, nms_top_k, nms_threshold,
# nms_eta, keep_top_k, normalized)
NMS_CASES = {
    "plain": ((2, 10, 3, 50, False, False), (0, 0.2, -1, 0.5, 1.0, -1, True)),
    "all_classes_top_k": ((2, 10, 3, 51, False, False), (-1, 0.1, 4, 0.3, 1.0, -1, True)),
    "keep_top_k_ties": ((3, 9, 4, 52, False, True), (1, 0.0, -1, 0.5, 1.0, 5, True)),
    "adaptive_eta": ((1, 12, 2, 53, False, False), (-1, 0.0, -1, 0.7, 0.8, -1, True)),
    "pixel_boxes": ((2, 8, 3, 54, True, False), (0, 0.3, 6, 0.4, 1.0, 3, False)),
}


@pytest.mark.parametrize("case", list(NMS_CASES.values()), ids=list(NMS_CASES))
def test_non_max_suppression(case):
    (n, m, c, seed, pixels, ties), params = case
    boxes, scores = nms_data(n, m, c, seed, pixels, ties)
    expected = nms_ref(boxes, scores, *params)
    assert len(expected[0]) > 0
    # Rows copy inputs (labels, scores, boxes) and the selection is exact integer logic: exact.
    check_op(OP.NON_MAX_SUPPRESSION, nms_inputs(boxes, scores, *params), list(expected), outputs=NMS_OUTS, **EXACT)


def test_non_max_suppression_nothing_kept_and_unknown_dims():
    # A score threshold above every score: no row at all ([0, 6]), zero counts; symbolic N and M.
    boxes, scores = nms_data(2, 5, 2, 55)
    expected = nms_ref(boxes, scores, 0, 1.5, -1, 0.5, 1.0, -1, True)
    assert expected[0].shape == (0, 6)
    dims = [[UNKNOWN, UNKNOWN, 4], [UNKNOWN, 2, UNKNOWN]]
    outputs = [Out(dims=[UNKNOWN, 6]), Out(P.INT32, dims=[UNKNOWN]), Out(P.INT32, dims=[UNKNOWN])]
    inputs = nms_inputs(boxes, scores, 0, 1.5, -1, 0.5, 1.0, -1, True, dims=dims)
    check_op(OP.NON_MAX_SUPPRESSION, inputs, list(expected), outputs=outputs, **EXACT)


def test_non_max_suppression_without_index():
    boxes, scores = nms_data(2, 6, 2, 56)
    expected = nms_ref(boxes, scores, -1, 0.2, -1, 0.5, 1.0, -1, True)[:2]
    inputs = nms_inputs(boxes, scores, -1, 0.2, -1, 0.5, 1.0, -1, True, return_index=False)
    check_op(OP.NON_MAX_SUPPRESSION, inputs, list(expected), outputs=NMS_OUTS[:2], **EXACT)


@pytest.mark.parametrize(
    "boxes_shape,scores_shape,change,operand,code",
    [
        ((2, 5, 4), (2, 3, 6), None, "'scores'", nna.ResultCode.INVALID_PARAMETER),
        ((2, 5, 5), (2, 3, 5), None, "'bboxes'", nna.ResultCode.INVALID_PARAMETER),
        ((2, 5, 8), (2, 3, 5), None, "'bboxes'", nna.ResultCode.FEATURE_NOT_SUPPORTED),
        ((2, 5, 4), (2, 3, 5), (2, i32([5, 5])), "'rois_num'", nna.ResultCode.FEATURE_NOT_SUPPORTED),
        ((2, 5, 4), (2, 3, 5), (7, f32([0.0])), "'nms_eta'", nna.ResultCode.INVALID_PARAMETER),
    ],
    ids=["box_count", "box_size", "polygons", "rois_num", "eta"],
)
def test_non_max_suppression_invalid(boxes_shape, scores_shape, change, operand, code):
    inputs = nms_inputs(rand(*boxes_shape), rand(*scores_shape), 0, 0.1, -1, 0.5, 1.0, -1, True)
    if change is not None:
        inputs[change[0]] = change[1]
    fn = lambda: run_op(OP.NON_MAX_SUPPRESSION, inputs, NMS_OUTS, [(1, 6), (2,), (1,)])  # noqa: E731
    expect_error(fn, "NON_MAX_SUPPRESSION", operand, code=code)


def test_non_max_suppression_return_index_needs_output():
    inputs = nms_inputs(rand(1, 4, 4), rand(1, 2, 4), 0, 0.1, -1, 0.5, 1.0, -1, True, return_index=True)
    fn = lambda: run_op(OP.NON_MAX_SUPPRESSION, inputs, NMS_OUTS[:2], [(1, 6), (1,)])  # noqa: E731
    expect_error(fn, "NON_MAX_SUPPRESSION", "'return_index'")
