"""Train the local cluster's demo models; run inside the MLServer image (``python3 train.py OUT``),
whose scikit-learn and XGBoost are the model servers' own, so a model loads where it is served.

Writes under ``OUT`` what the model store holds (``s3://models/<key>``):

- ``iris/1/model.joblib``: scikit-learn ``LogisticRegression`` on the iris data set; KServe's
  quickstart input ``[[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]`` gives ``[1, 1]``;
- ``iris/2/model.joblib``: the same with strong regularisation (``C=0.01``): ``[2, 2]`` for that
  input, so a rollout from version 1 to 2 shows in the answers;
- ``xgboost-iris/1/model.ubj``: an XGBoost classifier (10 trees of depth 2) on the same data;
- ``broken/1/model.joblib``: bytes no server can load (what a corrupt upload looks like);
- ``iris-3-features/1/model.joblib``: ``LogisticRegression`` on the first three features only: it
  loads and serves, and every request of four features fails (a new version whose input changed);
- ``iris-slow/1/``: version 1 under a custom MLServer runtime (``slow.py`` beside its
  ``model-settings.json``, which MLServer imports from the model's directory) that waits
  :data:`SLOW_SECONDS` before each answer: a slow candidate with the right answers.

Each model checks its own quickstart answer before it is written: a library upgrade that changed
them fails here, not in a test far away.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import joblib
import xgboost
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

QUICKSTART = [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]
#: how long ``iris-slow`` waits before each answer
SLOW_SECONDS = 2.0
SLOW_RUNTIME = f"""
import asyncio

from mlserver_sklearn import SKLearnModel


class SlowSKLearnModel(SKLearnModel):
    async def predict(self, payload):
        await asyncio.sleep({SLOW_SECONDS})
        return await super().predict(payload)
"""


def main(out: Path) -> None:
    x, y = load_iris(return_X_y=True)
    for version, c, expect in (("1", 1.0, [1, 1]), ("2", 0.01, [2, 2])):
        model = LogisticRegression(C=c, max_iter=1000).fit(x, y)
        _check(f"iris/{version}", model.predict(QUICKSTART).tolist(), expect)
        (out / "iris" / version).mkdir(parents=True, exist_ok=True)
        joblib.dump(model, out / "iris" / version / "model.joblib")
    booster = xgboost.XGBClassifier(n_estimators=10, max_depth=2).fit(x, y)
    _check("xgboost-iris/1", booster.predict(QUICKSTART).tolist(), [1, 1])
    (out / "xgboost-iris" / "1").mkdir(parents=True, exist_ok=True)
    booster.save_model(out / "xgboost-iris" / "1" / "model.ubj")
    (out / "broken" / "1").mkdir(parents=True, exist_ok=True)
    (out / "broken" / "1" / "model.joblib").write_bytes(b"not a model\n")
    _three_features(x, y, out / "iris-3-features" / "1")
    _slow(x, y, out / "iris-slow" / "1")
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        print(f"trained {f.relative_to(out)} ({f.stat().st_size} bytes)", flush=True)


def _three_features(x: Any, y: Any, out: Path) -> None:
    model = LogisticRegression(max_iter=1000).fit(x[:, :3], y)
    if model.n_features_in_ != 3:
        raise SystemExit(f"iris-3-features: trained on {model.n_features_in_} features")
    out.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, out / "model.joblib")


def _slow(x: Any, y: Any, out: Path) -> None:
    model = LogisticRegression(max_iter=1000).fit(x, y)
    _check("iris-slow/1", model.predict(QUICKSTART).tolist(), [1, 1])
    out.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, out / "model.joblib")
    (out / "slow.py").write_text(SLOW_RUNTIME)
    settings = {
        "name": "iris-slow",
        "implementation": "slow.SlowSKLearnModel",
        "parameters": {"uri": "./model.joblib"},
    }
    (out / "model-settings.json").write_text(json.dumps(settings, indent=2) + "\n")


def _check(name: str, got: list[int], expect: list[int]) -> None:
    if got != expect:
        raise SystemExit(f"{name}: the quickstart input gives {got}, expected {expect}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
