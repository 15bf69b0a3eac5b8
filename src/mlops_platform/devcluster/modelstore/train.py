"""Train the local cluster's demo models; run inside the MLServer image (``python3 train.py OUT``),
whose scikit-learn and XGBoost are the model servers' own, so a model loads where it is served.

Writes under ``OUT`` what the model store holds (``s3://models/<key>``):

- ``iris/1/model.joblib``: scikit-learn ``LogisticRegression`` on the iris data set; KServe's
  quickstart input ``[[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]`` gives ``[1, 1]``;
- ``iris/2/model.joblib``: the same with strong regularisation (``C=0.01``): ``[2, 2]`` for that
  input, so a rollout from version 1 to 2 shows in the answers;
- ``xgboost-iris/1/model.ubj``: an XGBoost classifier (10 trees of depth 2) on the same data;
- ``broken/1/model.joblib``: bytes no server can load (what a corrupt upload looks like).

Each model checks its own quickstart answer before it is written: a library upgrade that changed
them fails here, not in a test far away.
"""

from __future__ import annotations

import sys
from pathlib import Path

import joblib
import xgboost
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression

QUICKSTART = [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]


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
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        print(f"trained {f.relative_to(out)} ({f.stat().st_size} bytes)", flush=True)


def _check(name: str, got: list[int], expect: list[int]) -> None:
    if got != expect:
        raise SystemExit(f"{name}: the quickstart input gives {got}, expected {expect}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
