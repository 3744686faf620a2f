"""MetaSchedule's XGBoost cost model, observed and saved without pickles.

Stock `XGBModel.save` writes a tar holding a pickled numpy object array; loading it would
execute code from the session folder. Here the booster is saved as XGBoost JSON and the
training samples go to the session's SQLite as raw float32 bytes.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup, XGBModel
from tvm.s_tir.meta_schedule.utils import shash2hex

from tvmtui.core.stats import spearman


@derived_object
class TrackedXGBModel(XGBModel._cls):
    """XGBModel that reports what each update did and persists as data only.

    `on_update(metrics)` is called after every update with the fresh batch's validation
    (how well the model, before seeing the batch, ranked it) and training figures.
    """

    def __init__(self, *, on_update=None, on_samples=None, **kwargs) -> None:
        super().__init__(**kwargs)
        # Wraps XGBModel's own extractor (an attribute of an untyped base: hence the ignore).
        self.extractor = _BatchFeatures(self.extractor)  # type: ignore[has-type]
        self.on_update = on_update
        self.on_samples = on_samples
        self.trainings = 0

    @property
    def trained(self) -> bool:
        return self.booster is not None and self.data_size >= self.num_warmup_samples

    def score(self, context, candidates) -> list[float] | None:
        """The model's normalised scores (higher = faster), or None while it is warming up."""
        if not self.trained or not candidates:
            return None
        return [float(x) for x in self.predict(context, candidates)]

    def update(self, context, candidates, results) -> None:
        before_trained = self.trained
        costs = np.array(
            [np.median([float(s) for s in r.run_secs]) if r.run_secs else np.inf for r in results]
        )
        # The batch's features, extracted once for the check below and the training
        # (twice, this took 0.2 s more a round of 16 C12 Winograd candidates).
        self.extractor.hold(candidates)
        try:
            predicted = self.score(context, candidates) if before_trained else None
            size_before, trainings_before = self.data_size, self.trainings
            start = time.perf_counter()
            super().update(context, candidates, results)
            seconds = time.perf_counter() - start
        finally:
            self.extractor.hold(None)
        retrained = self.trainings > trainings_before
        metrics: dict[str, Any] = {
            "samples": int(self.data_size),
            "retrained": bool(retrained),
            "update_s": round(seconds, 4),
            "warmup_left": max(0, int(self.num_warmup_samples - self.data_size)),
        }
        ok = np.isfinite(costs)
        if predicted is not None and ok.sum() >= 3:
            pred = np.array(predicted)[ok]
            metrics["batch_spearman"] = spearman(list(pred), list(-costs[ok]))
        if retrained and self.booster is not None:
            metrics.update(self._training_fit())
        self._save_new_samples(context, size_before)
        if self.on_update is not None:
            self.on_update(metrics)

    def _train(self, xs, ys) -> None:
        """Train only once the warm-up samples exist: before that the model is never asked
        (its predictions are random), and on a few equal costs (a first batch of one layout
        transform) XGBoost's early stopping waits thousands of rounds: 10 s per update."""
        if self.data_size < self.num_warmup_samples:
            self.last_train_size = 0  # so the first update past the warm-up trains
            return
        super()._train(xs, ys)
        self.trainings += 1

    def _training_fit(self) -> dict:
        """RMSE and rank correlation of the retrained booster on its own training data."""
        xs, ys = [], []
        for group in self.data.values():
            ratio = np.divide(
                group.min_cost, group.costs, out=np.zeros_like(group.costs), where=group.costs != 0
            )
            xs.extend(group.features)
            ys.append(ratio)
        if not xs:
            return {}
        y = np.concatenate(ys)
        pred = self._predict(xs=xs)
        return {
            "train_rmse": float(np.sqrt(np.mean((pred - y) ** 2))),
            "train_spearman": spearman(list(pred), list(y)),
        }

    def _save_new_samples(self, context, size_before: int) -> None:
        if self.on_samples is None or self.data_size == size_before:
            return
        group_hash = shash2hex(context.mod)
        group = self.data[group_hash]
        new = self.data_size - size_before
        rows = []
        for feats, cost in zip(group.features[-new:], group.costs[-new:]):
            arr = np.ascontiguousarray(feats, dtype=np.float32)
            rows.append((group_hash, float(cost), arr.tobytes(), arr.shape[0], arr.shape[1]))
        self.on_samples(rows)

    # ---- persistence: data formats only ------------------------------------------------
    def save_booster(self, path: str) -> None:
        if self.booster is None:
            return
        tmp = path[: -len(".json")] + ".tmp.json"  # xgboost picks the format by suffix
        self.booster.save_model(tmp)
        os.replace(tmp, path)

    def restore(self, booster_path: str, samples: list[tuple[str, float, bytes, int, int]]) -> None:
        """Load the JSON booster and the stored samples (from `Session.samples()`)."""
        import xgboost as xgb

        groups: dict[str, tuple[list[np.ndarray], list[float]]] = OrderedDict()
        for group_hash, cost, blob, rows, cols in samples:
            feats = np.frombuffer(blob, dtype=np.float32).reshape(rows, cols)
            entry = groups.setdefault(group_hash, ([], []))
            entry[0].append(feats)
            entry[1].append(cost)
        self.data = OrderedDict(
            (h, FeatureGroup(group_hash=h, features=f, costs=np.array(c, dtype=np.float32)))
            for h, (f, c) in groups.items()
        )
        self.data_size = sum(len(c) for _, c in groups.values())
        self.last_train_size = 0
        if os.path.exists(booster_path):
            self.last_train_size = self.data_size
            booster = xgb.Booster()
            booster.load_model(booster_path)
            self.booster = booster


class _BatchFeatures:
    """A feature extractor that, while `hold` names a candidate list, extracts that list's
    features once and hands the same ones out again."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.held = None  # the candidate list
        self.features = None

    def hold(self, candidates) -> None:
        self.held, self.features = candidates, None

    def extract_from(self, context, candidates):
        if candidates is not self.held:
            return self.inner.extract_from(context, candidates)
        if self.features is None:
            self.features = self.inner.extract_from(context, candidates)
        return self.features
