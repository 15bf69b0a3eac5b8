"""The storage initializer's command line end to end in-process, on obstore's LocalStore standing
in for a bucket: the steps, the termination message, argument errors, credentials and store setup."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from obstore import store as obs_store

from mlops_platform.api import modeluri
from mlops_platform.storage import cli, failure, initializer, stores
from mlops_platform.testing.initializer import tar


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory served as the bucket ``models`` of every s3:// and gs:// URI."""
    root = tmp_path / "bucket"
    root.mkdir()

    def build(uri: str, parsed: modeluri.ModelURI, settings: stores.Settings) -> obs_store.LocalStore:
        assert parsed.location == "models"
        return obs_store.LocalStore(root)

    monkeypatch.setattr(stores, "build", build)
    return root


def put(bucket: Path, key: str, data: bytes) -> bytes:
    path = bucket / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def run(tmp_path: Path, *args: str) -> tuple[int, str]:
    """Exit code and the termination log's text."""
    log = tmp_path / "termination-log"
    code = cli.run(["fetch", *args, "--termination-log", str(log)])
    return code, log.read_text() if log.exists() else ""


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_single_object_with_checksum(
    bucket: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = put(bucket, "iris/model.joblib", b"sklearn" * 1000)
    dest = tmp_path / "mnt" / "models"
    code, log = run(
        tmp_path,
        "s3://models/iris/model.joblib",
        str(dest),
        "--layout=mlserver",
        "--format=sklearn",
        "--name=iris",
        f"--sha256={hashlib.sha256(data).hexdigest().upper()}",
    )
    assert (code, log) == (0, "")
    assert files(dest) == ["model-settings.json", "model.joblib"]
    assert (dest / "model.joblib").read_bytes() == data
    assert not (dest / initializer.STAGING).exists()
    docs = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert {"ts", "level", "msg"} <= set(docs[0])
    done = next(d for d in docs if d["msg"] == "downloaded")
    assert (done["bytes"], done["total"], done["percent"], done["file"]) == (
        7000,
        7000,
        100.0,
        "model.joblib",
    )
    assert docs[-1]["msg"] == "model delivered"


def test_checksum_mismatch_names_both_digests_and_leaves_no_model(
    bucket: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = put(bucket, "iris/model.onnx", b"onnx")
    dest = tmp_path / "dest"
    code, log = run(tmp_path, "s3://models/iris/model.onnx", str(dest), "--sha256", "ab" * 32)
    expected = (
        f"model download failed: s3://models/iris/model.onnx: sha256 mismatch: expected {'ab' * 32}, "
        f"got {hashlib.sha256(data).hexdigest()}\n"
    )
    assert (code, log) == (1, expected)
    assert capsys.readouterr().err.endswith(expected)
    assert list(dest.iterdir()) == []


def test_a_prefix_is_copied_recursively(bucket: Path, tmp_path: Path) -> None:
    put(bucket, "bert/3/config.pbtxt", b'name: "bert-base"\n')
    put(bucket, "bert/3/1/model.pt", b"w")
    put(bucket, "bert/30/other", b"not under the prefix")
    for uri in ("gs://models/bert/3", "gs://models/bert/3/"):
        dest = tmp_path / "dest"
        code, log = run(tmp_path, uri, str(dest), "--layout", "triton", "--name", "bert")
        assert (code, log) == (0, "")
        assert files(dest) == ["bert/1/model.pt", "bert/config.pbtxt"]
        assert (dest / "bert/config.pbtxt").read_text() == 'name: "bert"\n'


def test_an_archive_is_verified_then_unpacked(bucket: Path, tmp_path: Path) -> None:
    data = put(bucket, "bert.tar.gz", tar({"model.mar": b"mar"}))
    dest = tmp_path / "dest"
    sha = hashlib.sha256(data).hexdigest()
    code, _ = run(
        tmp_path, "s3://models/bert.tar.gz", str(dest), "--layout=torchserve", "--name=bert", "--sha256", sha
    )
    assert code == 0
    assert files(dest) == ["bert.mar"]


def test_delivery_replaces_an_earlier_attempts_files(bucket: Path, tmp_path: Path) -> None:
    put(bucket, "m/model.onnx", b"new")
    dest = tmp_path / "dest"
    (dest / initializer.STAGING / "download").mkdir(parents=True)
    (dest / initializer.STAGING / "download" / ".model.onnx.part").write_bytes(b"half")
    (dest / "model.onnx").write_bytes(b"old")
    assert run(tmp_path, "s3://models/m/model.onnx", str(dest)) == (0, "")
    assert files(dest) == ["model.onnx"]
    assert (dest / "model.onnx").read_bytes() == b"new"


@pytest.mark.parametrize(
    ("args", "code", "reason"),
    [
        (["s3://models/nothing/here"], 1, "no object at s3://models/nothing/here"),
        (["s3://models/nothing/"], 1, "no object at s3://models/nothing/"),
        (
            ["s3://models/m/", "--sha256", "0" * 64],
            1,
            "--sha256 verifies one object, but s3://models/m/ is a ",
        ),
        (
            ["s3://models/m/model.onnx", "--sha256", "xyz"],
            1,
            "--sha256 'xyz' is not a SHA-256 (64 hex digits)",
        ),
        (["s3://Models/x"], 1, "bad model URI: 's3://Models/x': 'Models' is not a bucket name"),
        (["models/x"], 1, "bad model URI: 'models/x' is not a URI"),
        (
            ["pvc://claim/x"],
            1,
            "pvc://claim/x: pvc:// is not fetched (pvc:// is mounted, file:// is in the image)",
        ),
        (["s3://models/m/model.onnx", "--name", "a/b"], 1, "--name 'a/b' is not a model name"),
        (
            ["s3://models/m/model.onnx", "--layout", "kserve"],
            2,
            "bad arguments: Invalid value for '--layout'",
        ),
        (["s3://models/m/model.onnx", "--bogus"], 2, "bad arguments: No such option '--bogus'"),
        (["s3://models/m/model.onnx", "--credentials", "/nonexistent/dir"], 1, "credentials directory "),
        (
            ["s3://models/m/model.onnx", "--layout", "torchserve"],
            1,
            "torchserve layout: torchserve serves .mar",
        ),
    ],
)
def test_failures_write_one_line(
    bucket: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, reason: str
) -> None:
    put(bucket, "m/model.onnx", b"x")
    dest = tmp_path / "dest"
    got, log = run(tmp_path, args[0], str(dest), *args[1:])
    assert got == code
    assert log.startswith("model download failed: " + reason), log
    assert log.count("\n") == 1
    err = capsys.readouterr().err
    assert err.endswith(log) and "Traceback" not in err


def test_missing_arguments_reach_the_termination_log_too(tmp_path: Path) -> None:
    log = tmp_path / "tl"
    assert cli.run(["fetch", f"--termination-log={log}"]) == 2
    assert log.read_text() == "model download failed: bad arguments: Missing argument 'URI'.\n"


def test_an_unexpected_error_is_one_line_with_its_type(
    bucket: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(request: initializer.Request) -> initializer.Result:
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(initializer, "fetch", boom)
    code, log = run(tmp_path, "s3://models/m/model.onnx", str(tmp_path / "dest"))
    assert (code, log) == (1, "model download failed: unexpected error: RuntimeError: something broke\n")
    error = json.loads(capsys.readouterr().err.splitlines()[-2])
    assert error["msg"] == "unexpected error" and "RuntimeError" in error["stacktrace"]


def test_an_unwritable_termination_log_still_reports_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    line = cli.report("x", Path("/nonexistent-dir/termination-log"))
    assert line == "model download failed: x"
    assert capsys.readouterr().err == "model download failed: x\n"


def test_termination_log_path_forms() -> None:
    assert cli.termination_log_path(["fetch", "--termination-log", "/a"]) == Path("/a")
    assert cli.termination_log_path(["fetch", "--termination-log=/b"]) == Path("/b")
    assert cli.termination_log_path(["fetch"]) == Path("/dev/termination-log")


def test_reasons_stay_on_one_bounded_line() -> None:
    assert failure.line("a\nb\t c") == "model download failed: a b c"
    assert len(failure.DownloadFailed("x" * 5000).reason) == failure.MAX_REASON


def test_credentials_are_read_per_key_without_trailing_newlines(tmp_path: Path) -> None:
    (tmp_path / "AWS_ACCESS_KEY_ID").write_text("AKIA\n")
    (tmp_path / "AWS_SECRET_ACCESS_KEY").write_text("s3cret\n")
    (tmp_path / "HTTP_AUTHORIZATION").write_text("Bearer t\n")
    (tmp_path / "unrelated").write_text("ignored")
    assert stores.read_credentials(tmp_path) == {
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "s3cret",
        "HTTP_AUTHORIZATION": "Bearer t",
    }
    assert stores.read_credentials(None) == {}


def test_store_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    settings = stores.Settings(endpoint="http://minio:9000", region="eu-west-1")
    s3 = stores.s3(modeluri.parse("s3://models/x"), settings)
    assert s3.config["endpoint"] == "http://minio:9000"
    assert s3.config["region"] == "eu-west-1"
    assert s3.config.get("skip_signature") in (True, "true")  # no credentials anywhere: anonymous
    assert s3.client_options is not None and s3.client_options["allow_http"] in (True, "true")
    keyed = stores.Settings(
        credentials={
            "AWS_ACCESS_KEY_ID": "a",
            "AWS_SECRET_ACCESS_KEY": "b",
            "AWS_ENDPOINT_URL": "https://s3.x",
        }
    )
    s3 = stores.s3(modeluri.parse("s3://models/x"), keyed)
    assert (s3.config["access_key_id"], s3.config["endpoint"]) == ("a", "https://s3.x")
    assert s3.client_options is not None and s3.client_options["allow_http"] in (False, "false")
    with pytest.raises(
        failure.DownloadFailed, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together"
    ):
        stores.s3(modeluri.parse("s3://models/x"), stores.Settings(credentials={"AWS_ACCESS_KEY_ID": "a"}))
    with pytest.raises(failure.DownloadFailed, match="endpoint 'minio:9000' is not an http"):
        stores.s3(modeluri.parse("s3://models/x"), stores.Settings(endpoint="minio:9000"))
    key = json.loads(stores.emulator_key("http://gcs:4443"))
    assert (key["gcs_base_url"], key["disable_oauth"]) == ("http://gcs:4443", True)
    gcs = stores.gcs(modeluri.parse("gs://models/x"), stores.Settings(endpoint="http://gcs:4443/"))
    assert gcs.config["base_url"] == "http://gcs:4443"
    with pytest.raises(failure.DownloadFailed, match="GOOGLE_SERVICE_ACCOUNT_KEY is not JSON"):
        stores.gcs(
            modeluri.parse("gs://models/x"), stores.Settings(credentials={"GOOGLE_SERVICE_ACCOUNT_KEY": "{"})
        )
    http = stores.http(
        "https://h/m.onnx?sig=1", stores.Settings(credentials={"HTTP_AUTHORIZATION": "Bearer t"})
    )
    assert http.client_options is not None
    assert http.client_options["default_headers"] == {"authorization": b"Bearer t"}
