"""Tree ensembles: sonnx against onnxruntime and scikit-learn's own ``predict`` on the same
scikit-learn models, converted once by skl2onnx.

    python bench/trees.py                                  # 100,000 rows x 30 features
    python bench/trees.py --rows 5000 --trees 50 --repeats 3     # a quick run

Two models: a RandomForestRegressor of ``--trees`` trees of depth 8 (sonnx's tree traversal
strategy) and a HistGradientBoostingClassifier of ``--iterations`` rounds (binary, depth-limited
trees, NaNs in 5 % of the inputs). Each row times one call on the whole batch: sonnx's
``SingaRep.run`` (NumPy in, NumPy out) against onnxruntime's session (ratio column) and
against ``predict`` (the sklearn column gives sonnx / sklearn). Results are checked equal
(labels) or close (values, 1e-4) before anything is timed. The set-up rows time
``sonnx.prepare`` plus the first run, which builds the forest tensors.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import skl2onnx.common.tree_ensemble as skl2onnx_trees
from common import (
    add_common_args,
    emit,
    machine_facts,
    ort_session,
    pin_threads,
    row_from,
    time_once,
    time_sides,
)
from skl2onnx import to_onnx
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestRegressor

import sonnx
from sonnx import autograd

FEATURES = 30


def _missing_tracks_as_ints() -> None:
    """skl2onnx 1.20 writes HistGradientBoosting's missing-value flags as a mix of bools and
    ints, which onnx 1.23 refuses; pass them on as ints."""
    add_node = skl2onnx_trees.add_node

    def as_ints(*args, nodes_missing_value_tracks_true=0, **kwargs):
        flag = int(nodes_missing_value_tracks_true)
        return add_node(*args, nodes_missing_value_tracks_true=flag, **kwargs)

    skl2onnx_trees.add_node = as_ints


def _data(rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    signal = x[:, :5] @ rng.normal(size=5) + np.sin(3 * x[:, 5])
    value = signal + 0.1 * rng.normal(size=rows)
    return x, value, (signal > 0).astype(np.int64)


def _models(args: argparse.Namespace, x, value, label) -> list[tuple[str, object, np.ndarray]]:
    train = min(len(x), 20000)
    forest = RandomForestRegressor(args.trees, max_depth=8, n_jobs=-1, random_state=0)
    forest.fit(x[:train], value[:train])
    with_nans = x.copy()
    with_nans[np.random.default_rng(1).random(x.shape) < 0.05] = np.nan
    boosting = HistGradientBoostingClassifier(
        max_iter=args.iterations, early_stopping=False, random_state=0
    )
    boosting.fit(with_nans[:train], label[:train])
    return [
        (f"RandomForest {args.trees}x depth 8", forest, x),
        (f"HistGB {args.iterations} iterations", boosting, with_nans),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows per batch")
    parser.add_argument("--trees", type=int, default=500, help="random forest trees")
    parser.add_argument("--iterations", type=int, default=300, help="boosting iterations")
    add_common_args(parser, repeats=5, warmup=1)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    sonnx.tune_process_for_serving()  # as a server would (both sides alike)
    autograd.training = False
    _missing_tracks_as_ints()
    x, value, label = _data(args.rows)
    rows = []
    for case, estimator, inputs in _models(args, x, value, label):
        options = {"zipmap": False} if hasattr(estimator, "predict_proba") else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = to_onnx(estimator, inputs[:1], options=options).SerializeToString()
        session = ort_session(data, threads)
        rep, setup = time_once(lambda data=data, inputs=inputs: _prepared(data, inputs))
        _, ort_setup = time_once(lambda data=data: ort_session(data, threads))
        feeds = {session.get_inputs()[0].name: inputs}

        def ours(rep=rep, inputs=inputs):
            return [t.numpy() for t in rep.run([inputs])]

        def theirs(session=session, feeds=feeds):
            return session.run(None, feeds)

        def sklearn(estimator=estimator, inputs=inputs):
            return estimator.predict(inputs)

        _check(case, ours(), theirs(), sklearn())
        timings = time_sides([ours, theirs, sklearn], args.repeats, args.warmup)
        ratio = timings[0].median / timings[2].median
        rows.append(
            row_from(case, "onnxruntime", (timings[0], timings[1]), sklearn=ratio, rows=len(x))
        )
        rows.append(
            row_from(
                f"  set-up {case.split()[0]}",
                "onnxruntime session",
                (_single(setup), _single(ort_setup)),
            )
        )
    emit(
        "Tree ensembles: sonnx vs onnxruntime vs scikit-learn",
        machine_facts(threads),
        {"rows": args.rows, "features": FEATURES, "repeats": args.repeats},
        rows,
        args.json,
        extra_columns=("sklearn", "rows"),
        notes=["sklearn column: sonnx time / sklearn predict time (below 1: sonnx faster)"],
    )


def _prepared(data: bytes, inputs: np.ndarray) -> sonnx.SingaRep:
    rep = sonnx.prepare(data)
    rep.run([inputs[:1]])
    return rep


def _single(seconds: float):
    from common import Timing

    return Timing([seconds])


def _check(case: str, ours: list, theirs: list, predicted: np.ndarray) -> None:
    if ours[0].dtype == np.int64:
        mismatches = int((ours[0] != theirs[0]).sum())
        np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-4, atol=1e-4, err_msg=case)
        # float32 and float64 sums may fall on either side of 0.5 for a handful of rows
        assert mismatches <= len(predicted) // 10_000 + 1, f"{case}: {mismatches} labels differ"
    else:
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-4, atol=1e-4, err_msg=case)
        np.testing.assert_allclose(ours[0][:, 0], predicted, rtol=1e-4, atol=1e-4, err_msg=case)


if __name__ == "__main__":
    main()
