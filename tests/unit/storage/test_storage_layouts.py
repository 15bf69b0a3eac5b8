"""The storage initializer's layouts: Triton repository, MLServer model-settings.json, TorchServe
model store, and as fetched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops_platform.storage import failure, layouts


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def make(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def src(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    return tmp_path / "src"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    (tmp_path / "out").mkdir()
    return tmp_path / "out"


@pytest.mark.parametrize(
    ("file_name", "model_format", "backend", "placed"),
    [
        ("resnet.onnx", None, "onnxruntime", "model.onnx"),
        ("engine.plan", None, "tensorrt", "model.plan"),
        ("net.engine", None, "tensorrt", "model.plan"),
        ("traced.pt", None, "pytorch", "model.pt"),
        ("model.py", None, "python", "model.py"),
        ("weights.bin", "onnx", "onnxruntime", "model.onnx"),
        ("resnet.onnx", "TensorRT", "tensorrt", "model.plan"),
    ],
)
def test_triton_single_file_gets_a_version_and_a_generated_config(
    src: Path, out: Path, file_name: str, model_format: str | None, backend: str, placed: str
) -> None:
    make(src, {file_name: "weights"})
    layouts.arrange("triton", src, out, "iris", model_format)
    assert tree(out) == ["iris/1/" + placed, "iris/config.pbtxt"]
    assert (out / "iris/1" / placed).read_text() == "weights"
    assert (out / "iris/config.pbtxt").read_text() == f'name: "iris"\nbackend: "{backend}"\n'


def test_triton_single_file_without_a_known_backend_fails(src: Path, out: Path) -> None:
    make(src, {"model.bin": "x"})
    with pytest.raises(failure.DownloadFailed, match=r"triton layout: no --format and .*'model.bin'"):
        layouts.arrange("triton", src, out, "iris", None)


def test_triton_model_directory_is_named_after_the_model(src: Path, out: Path) -> None:
    config = 'name: "resnet50"\nplatform: "onnxruntime_onnx"\ninput [\n  {\n    name: "x"\n  }\n]\n'
    make(src, {"config.pbtxt": config, "1/model.onnx": "w", "labels.txt": "a"})
    layouts.arrange("triton", src, out, "iris", None)
    assert tree(out) == ["iris/1/model.onnx", "iris/config.pbtxt", "iris/labels.txt"]
    text = (out / "iris/config.pbtxt").read_text()
    assert text.startswith('name: "iris"\n')
    assert 'name: "x"' in text  # nested names untouched


def test_triton_version_directory_without_config_gets_one_from_the_format(src: Path, out: Path) -> None:
    make(src, {"1/model.onnx": "w", "2/model.onnx": "w2"})
    layouts.arrange("triton", src, out, "iris", "onnx")
    assert tree(out) == ["iris/1/model.onnx", "iris/2/model.onnx", "iris/config.pbtxt"]
    with pytest.raises(failure.DownloadFailed, match=r"no config\.pbtxt and --format None"):
        layouts.arrange("triton", make(src, {"1/model.onnx": "w"}), out / "again", "iris", None)


def test_triton_repository_is_kept(src: Path, out: Path) -> None:
    make(src, {"a/config.pbtxt": 'name: "a"', "a/1/model.onnx": "w", "b/1/model.plan": "w"})
    layouts.arrange("triton", src, out, "iris", None)
    assert tree(out) == ["a/1/model.onnx", "a/config.pbtxt", "b/1/model.plan"]
    assert (out / "a/config.pbtxt").read_text() == 'name: "a"'


def test_triton_unrecognised_tree_fails_listing_the_files(src: Path, out: Path) -> None:
    make(src, {"x/model.onnx": "w", "y/readme.md": "r"})
    with pytest.raises(
        failure.DownloadFailed, match=r"neither a model repository.*x/model.onnx, y/readme.md"
    ):
        layouts.arrange("triton", src, out, "iris", None)


def test_set_config_name_only_touches_the_top_level_name() -> None:
    text = 'platform: "x"\noutput {\n  name: "y"\n}\nname: "old"\n'
    assert layouts.set_config_name(text, "new") == 'platform: "x"\noutput {\n  name: "y"\n}\nname: "new"\n'
    assert layouts.set_config_name('backend: "b"\n', "new") == 'backend: "b"\n'


@pytest.mark.parametrize(
    ("model_format", "implementation"),
    [
        ("sklearn", "mlserver_sklearn.SKLearnModel"),
        ("xgboost", "mlserver_xgboost.XGBoostModel"),
        ("LightGBM", "mlserver_lightgbm.LightGBMModel"),
        ("mlflow", "mlserver_mlflow.MLflowRuntime"),
    ],
)
def test_mlserver_settings_generated_from_the_format(
    src: Path, out: Path, model_format: str, implementation: str
) -> None:
    make(src, {"model.joblib": "m"})
    layouts.arrange("mlserver", src, out, "iris", model_format)
    assert tree(out) == ["model-settings.json", "model.joblib"]
    doc = json.loads((out / "model-settings.json").read_text())
    assert doc == {"name": "iris", "implementation": implementation, "parameters": {"uri": "./model.joblib"}}


def test_mlserver_directory_uri_and_inferred_formats(src: Path, out: Path) -> None:
    make(src, {"MLmodel": "flavors: {}", "model.pkl": "m", "conda.yaml": ""})
    layouts.arrange("mlserver", src, out, "iris", None)
    doc = json.loads((out / "model-settings.json").read_text())
    assert doc["implementation"] == "mlserver_mlflow.MLflowRuntime"
    assert doc["parameters"] == {"uri": "./"}
    src2, out2 = make(src.parent / "s2", {"m.bst": "b"}), src.parent / "o2"
    layouts.arrange("mlserver", src2, out2, "iris", None)
    assert json.loads((out2 / "model-settings.json").read_text())["implementation"] == (
        "mlserver_xgboost.XGBoostModel"
    )


def test_mlserver_keeps_the_artifacts_settings_and_names_a_single_model(src: Path, out: Path) -> None:
    settings = {"name": "old", "implementation": "custom.Runtime", "parameters": {"uri": "./m.bin"}}
    make(src, {"model-settings.json": json.dumps(settings), "m.bin": "m"})
    layouts.arrange("mlserver", src, out, "iris", "sklearn")
    assert json.loads((out / "model-settings.json").read_text()) == {**settings, "name": "iris"}


def test_mlserver_keeps_several_models_when_one_is_the_inferenceservice(src: Path, out: Path) -> None:
    a = json.dumps({"name": "iris", "implementation": "x.A"})
    b = json.dumps({"implementation": "x.B"})  # MLServer names it by its folder: b
    make(src, {"a/model-settings.json": a, "b/model-settings.json": b})
    layouts.arrange("mlserver", src, out, "iris", None)
    assert (out / "a/model-settings.json").read_text() == a
    assert (out / "b/model-settings.json").read_text() == b


def test_mlserver_refuses_several_models_none_the_inferenceservice(src: Path, out: Path) -> None:
    """The readiness probe asks MLServer about the model named as the InferenceService."""
    a = json.dumps({"name": "a", "implementation": "x.A"})
    make(src, {"a/model-settings.json": a, "iris2/model-settings.json": "{}"})
    with pytest.raises(
        failure.DownloadFailed,
        match=r"2 models are named a, iris2; none is named 'iris', the InferenceService's",
    ):
        layouts.arrange("mlserver", src, out, "iris", None)
    assert not out.exists() or tree(out) == []


def test_mlserver_without_settings_or_format_fails(src: Path, out: Path) -> None:
    make(src, {"model.pkl": "m"})
    with pytest.raises(
        failure.DownloadFailed, match=r"mlserver layout: no model-settings.json .* no --format"
    ):
        layouts.arrange("mlserver", src, out, "iris", None)
    with pytest.raises(failure.DownloadFailed, match="--format 'onnx' names no MLServer runtime"):
        layouts.arrange("mlserver", src, out, "iris", "onnx")


def test_torchserve_single_archive_is_named_after_the_model(src: Path, out: Path) -> None:
    make(src, {"bert-base.mar": "zip", "readme.md": "r"})
    layouts.arrange("torchserve", src, out, "bert", "pytorch")
    assert tree(out) == ["bert.mar"]


def test_torchserve_several_archives_and_exploded_ones_are_kept(src: Path, out: Path) -> None:
    make(src, {"a.mar": "1", "sub/b.mar": "2", "c/MAR-INF/MANIFEST.json": "{}", "c/handler.py": ""})
    layouts.arrange("torchserve", src, out, "bert", None)
    assert tree(out) == ["a.mar", "b.mar", "c/MAR-INF/MANIFEST.json", "c/handler.py"]


def test_torchserve_without_archives_fails(src: Path, out: Path) -> None:
    make(src, {"model.pt": "w"})
    with pytest.raises(failure.DownloadFailed, match=r"torchserve serves \.mar archives: none .*model\.pt"):
        layouts.arrange("torchserve", src, out, "bert", None)


def test_none_keeps_the_files_as_fetched(src: Path, out: Path) -> None:
    make(src, {"a/b/c.bin": "1", "d.txt": "2"})
    layouts.arrange("none", src, out, "iris", None)
    assert tree(out) == ["a/b/c.bin", "d.txt"]
