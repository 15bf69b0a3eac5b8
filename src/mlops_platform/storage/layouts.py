"""How each runtime expects the model directory, built from what was fetched (``--layout``).

Each layout moves the artifact's files from ``src`` (the download, an archive already unpacked) into
``out`` (an empty directory that then becomes DEST), adding what the runtime needs and the artifact
lacks. A single model is named ``name`` (``--name``: the InferenceService's name, so a canary with
its own artifact keeps the clients' request paths); a repository of several models is kept as is.

- ``triton`` (a model repository): a repository (``<model>/config.pbtxt`` or ``<model>/<version>/``)
  is kept; a model directory (``config.pbtxt`` and/or ``<version>/``) becomes ``out/<name>/``; a
  single model file becomes ``out/<name>/1/model.<ext>`` with a minimal ``config.pbtxt`` naming the
  backend (from ``--format``, else the extension).
- ``mlserver``: ``model-settings.json`` at the top: the artifact's own (its ``name`` set to ``name``
  when it is the only one), else one generated from ``--format`` (``implementation``) with
  ``parameters.uri`` pointing at the model file (or the directory, where the runtime finds it).
- ``torchserve`` (a model store): ``.mar`` archives (or exploded archives with
  ``MAR-INF/MANIFEST.json``) at the top; a single one is ``out/<name>.mar``; none is a failure.
- ``none``: as fetched.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

from mlops_platform.storage import failure

log = logging.getLogger("mlops_platform.storage")

LAYOUTS = ("none", "triton", "mlserver", "torchserve")

#: Triton: the model format -> (the backend in config.pbtxt, the model file's default name)
TRITON_BACKENDS: dict[str, tuple[str, str]] = {
    "onnx": ("onnxruntime", "model.onnx"),
    "tensorrt": ("tensorrt", "model.plan"),
    "pytorch": ("pytorch", "model.pt"),
    "python": ("python", "model.py"),
}
#: Triton: a single model file's extension -> its model format
TRITON_EXTENSIONS: dict[str, str] = {
    ".onnx": "onnx",
    ".plan": "tensorrt",
    ".engine": "tensorrt",
    ".pt": "pytorch",
    ".pth": "pytorch",
    ".torchscript": "pytorch",
    ".py": "python",
}
#: MLServer: the model format -> the inference runtime's class (``implementation``)
MLSERVER_IMPLEMENTATIONS: dict[str, str] = {
    "sklearn": "mlserver_sklearn.SKLearnModel",
    "xgboost": "mlserver_xgboost.XGBoostModel",
    "lightgbm": "mlserver_lightgbm.LightGBMModel",
    "catboost": "mlserver_catboost.CatboostModel",
    "mlflow": "mlserver_mlflow.MLflowRuntime",
    "huggingface": "mlserver_huggingface.HuggingFaceRuntime",
    "mllib": "mlserver_mllib.MLlibModel",
    "alibi-detect": "mlserver_alibi_detect.AlibiDetectRuntime",
    "alibi-explain": "mlserver_alibi_explain.AlibiExplainRuntime",
}
#: MLServer: a model file's extension -> the format it implies when --format is not given
MLSERVER_EXTENSIONS: dict[str, str] = {".joblib": "sklearn", ".bst": "xgboost", ".ubj": "xgboost"}
MLSERVER_SETTINGS = "model-settings.json"
TRITON_CONFIG = "config.pbtxt"
TORCHSERVE_MANIFEST = Path("MAR-INF", "MANIFEST.json")

_TOP_LEVEL_NAME = re.compile(r"^\s*name\s*:")


def _fail(layout: str, reason: str) -> failure.DownloadFailed:
    return failure.DownloadFailed(f"{layout} layout: {reason}")


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())


def _listing(root: Path, limit: int = 8) -> str:
    names = [str(p.relative_to(root)) for p in _files(root)]
    more = f", ... ({len(names)} files)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more if names else "nothing"


def move_contents(src: Path, dst: Path) -> None:
    """Move every entry of ``src`` into ``dst`` (created); same file system, so renames only."""
    dst.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        os.replace(entry, dst / entry.name)


def _is_version_dir(path: Path) -> bool:
    return path.is_dir() and path.name.isdigit()


def _is_triton_model(path: Path) -> bool:
    return path.is_dir() and (
        (path / TRITON_CONFIG).is_file() or any(_is_version_dir(c) for c in path.iterdir())
    )


def set_config_name(text: str, name: str) -> str:
    """``config.pbtxt`` text with its top-level ``name`` (if any) set to ``name`` (Triton requires
    it to match the model's directory). Nested ``name`` fields (inputs, outputs) are left alone."""
    depth, out, done = 0, [], False
    for line in text.splitlines(keepends=True):
        if depth == 0 and not done and _TOP_LEVEL_NAME.match(line):
            line = f'name: "{name}"\n'
            done = True
        depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
        out.append(line)
    return "".join(out)


def triton_config(name: str, backend: str) -> str:
    """A minimal ``config.pbtxt``: Triton completes inputs and outputs from the model where its
    backend can (ONNX Runtime, TensorRT, Python's ``auto_complete_config``)."""
    return f'name: "{name}"\nbackend: "{backend}"\n'


def triton(src: Path, out: Path, name: str, model_format: str | None) -> None:
    entries = sorted(src.iterdir())
    if _is_triton_model(src):
        model = out / name
        move_contents(src, model)
        config = model / TRITON_CONFIG
        if config.is_file():
            text = config.read_text(encoding="utf-8")
            renamed = set_config_name(text, name)
            if renamed != text:
                config.write_text(renamed, encoding="utf-8")
                log.info("config.pbtxt: model name set", extra={"model": name})
        else:
            _generated_config(model, name, model_format, None)
        return
    if any(_is_triton_model(e) for e in entries):
        move_contents(src, out)
        return
    files = _files(src)
    if len(files) != 1:
        raise _fail(
            "triton",
            "the artifact is neither a model repository (<model>/config.pbtxt), a model directory "
            f"(config.pbtxt, <version>/) nor a single model file: {_listing(src)}",
        )
    (single,) = files
    fmt = _triton_format(model_format, single)
    file_name = TRITON_BACKENDS[fmt][1]
    version = out / name / "1"
    version.mkdir(parents=True)
    os.replace(single, version / file_name)
    _generated_config(out / name, name, fmt, single.name)


def _triton_format(model_format: str | None, single: Path) -> str:
    fmt = (model_format or "").lower()
    if fmt in TRITON_BACKENDS:
        return fmt
    by_extension = TRITON_EXTENSIONS.get(single.suffix.lower())
    if by_extension is not None:
        return by_extension
    known = ", ".join(sorted(TRITON_EXTENSIONS))
    given = f"--format {model_format!r} and " if model_format else "no --format and "
    raise _fail(
        "triton",
        f"{given}the extension of {single.name!r} names no Triton backend for a single model file "
        f"(formats: {', '.join(TRITON_BACKENDS)}; extensions: {known})",
    )


def _generated_config(model: Path, name: str, model_format: str | None, file_name: str | None) -> None:
    fmt = (model_format or "").lower()
    if fmt not in TRITON_BACKENDS:
        raise _fail(
            "triton",
            f"the model directory has no {TRITON_CONFIG} and --format "
            f"{model_format!r} names no backend to generate one ({', '.join(TRITON_BACKENDS)})",
        )
    backend = TRITON_BACKENDS[fmt][0]
    (model / TRITON_CONFIG).write_text(triton_config(name, backend), encoding="utf-8")
    log.info("config.pbtxt generated", extra={"model": name, "backend": backend, "file": file_name})
    if fmt == "pytorch":
        log.warning(
            "Triton's PyTorch backend needs the inputs and outputs in config.pbtxt: ship the model "
            "with its own config.pbtxt",
            extra={"model": name},
        )


def mlserver(src: Path, out: Path, name: str, model_format: str | None) -> None:
    settings = sorted(src.rglob(MLSERVER_SETTINGS))
    if settings:
        if len(settings) > 1:
            _require_named(settings, name)
        move_contents(src, out)
        if len(settings) == 1:
            _set_settings_name(out / settings[0].relative_to(src), name)
        return
    files = _files(src)
    if not files:
        raise _fail("mlserver", "the artifact is empty")
    fmt = _mlserver_format(model_format, src, files)
    move_contents(src, out)
    doc = {
        "name": name,
        "implementation": MLSERVER_IMPLEMENTATIONS[fmt],
        "parameters": {"uri": _mlserver_uri(src, files)},
    }
    (out / MLSERVER_SETTINGS).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    log.info(f"{MLSERVER_SETTINGS} generated", extra={"model": name, "implementation": doc["implementation"]})


def _mlserver_format(model_format: str | None, src: Path, files: list[Path]) -> str:
    fmt = (model_format or "").lower()
    if fmt in MLSERVER_IMPLEMENTATIONS:
        return fmt
    if model_format:
        raise _fail(
            "mlserver",
            f"no {MLSERVER_SETTINGS} in the artifact and --format {model_format!r} names no MLServer "
            f"runtime to generate one ({', '.join(MLSERVER_IMPLEMENTATIONS)})",
        )
    if (src / "MLmodel").is_file():
        return "mlflow"
    implied = {
        MLSERVER_EXTENSIONS[f.suffix.lower()] for f in files if f.suffix.lower() in MLSERVER_EXTENSIONS
    }
    if len(implied) == 1:
        return implied.pop()
    raise _fail(
        "mlserver",
        f"no {MLSERVER_SETTINGS} in the artifact and no --format to generate one "
        f"({', '.join(MLSERVER_IMPLEMENTATIONS)}): {_listing(src)}",
    )


def _mlserver_uri(src: Path, files: list[Path]) -> str:
    """``parameters.uri``, relative to the settings file: the one model file, else the directory
    (MLServer's runtimes look there for their well-known file names: model.joblib, model.bst, ...)."""
    if len(files) == 1:
        return f"./{files[0].relative_to(src).as_posix()}"
    return "./"


def _settings_doc(path: Path) -> dict[str, object]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise _fail("mlserver", f"{MLSERVER_SETTINGS} in the artifact is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise _fail("mlserver", f"{MLSERVER_SETTINGS} in the artifact is not a JSON object")
    return doc


def _require_named(settings: list[Path], name: str) -> None:
    """Several models are kept as they are, but one must be ``name``: the model the readiness probe
    asks about (MLServer's server-wide readiness says ready before any model has loaded) and the
    one ``infer`` addresses. MLServer names a model by its settings' ``name``, else its folder."""
    names = sorted(str(_settings_doc(p).get("name") or p.parent.name) for p in settings)
    if name not in names:
        raise _fail(
            "mlserver",
            f"the artifact's {len(names)} models are named {', '.join(names)}; none is named {name!r}, "
            "the InferenceService's name (the model its readiness probe and `infer` address): "
            "name one of them so",
        )


def _set_settings_name(path: Path, name: str) -> None:
    doc = _settings_doc(path)
    if doc.get("name") != name:
        log.info(f"{MLSERVER_SETTINGS}: model name set", extra={"model": name, "was": doc.get("name")})
        doc["name"] = name
        path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def torchserve(src: Path, out: Path, name: str, model_format: str | None) -> None:
    del model_format  # a .mar says everything
    archives = [p for p in _files(src) if p.suffix.lower() == ".mar" and p.is_file()]
    exploded = sorted(p.parent.parent for p in src.rglob(str(TORCHSERVE_MANIFEST)) if p.is_file())
    if not archives and not exploded:
        raise _fail("torchserve", f"torchserve serves .mar archives: none in the artifact ({_listing(src)})")
    out.mkdir(parents=True, exist_ok=True)
    if len(archives) == 1 and not exploded:
        os.replace(archives[0], out / f"{name}.mar")
        return
    for entry in [*archives, *exploded]:
        target = out / entry.name
        if target.exists():
            raise _fail("torchserve", f"two model archives named {entry.name!r} in the artifact")
        os.replace(entry, target)
    log.info("model store", extra={"archives": sorted(e.name for e in [*archives, *exploded])})


def none(src: Path, out: Path, name: str, model_format: str | None) -> None:
    del name, model_format
    move_contents(src, out)


ARRANGE: dict[str, Callable[[Path, Path, str, str | None], None]] = {
    "none": none,
    "triton": triton,
    "mlserver": mlserver,
    "torchserve": torchserve,
}


def arrange(layout: str, src: Path, out: Path, name: str, model_format: str | None) -> None:
    """Lay out ``src`` into ``out`` for ``layout`` (one of :data:`LAYOUTS`)."""
    ARRANGE[layout](src, out, name, model_format)
