"""How a real node's images are built on this machine: no registry, no Docker engine.

A :class:`Recipe` (``images`` holds them) is an image whose inputs (its steps, pinned package
lists, the Debian suite, its base's key, this module's version of the steps) hash to its cache key:
``<cache>/images/<name>-<key>/`` holds its OCI layout (``oci/``, what an image built on it starts
from) and ``image.tar`` (what ``ctr images import`` reads), built once (:func:`archive`) and
imported into every node. Root filesystems come from Debian's packages (mmdebstrap, with the
machine's apt sources), Python packages from PyPI as wheels at pinned versions (``pip wheel`` on
this machine, installed into the image offline, no pip left in it; their bytecode checked by its
source's hash, which no packing changes), a tool's binary from its cache
directory (``binaries``); umoci packs the OCI image (an image built on another adds one layer) and
skopeo writes the archive. No image JSON is written by hand. Next to each: ``packages.txt``, what it
holds (``dpkg-query`` and ``pip freeze`` of its root filesystem).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import resources as importlib_resources
from pathlib import Path

from mlops_platform.devcluster import binaries, gomod

#: the registry-less name every local image carries (never an upstream image's name)
REGISTRY = "mlops.local"
DEBIAN_SUITE = "bookworm"
_STEPS_VERSION = "2"  # bump when the build steps below change what an image holds
#: the pip install step's own version (in the key of an image with ``requirements`` only, so that a
#: change to it rebuilds those images and no other)
_PIP_STEP_VERSION = "2"
VENV = "/opt/venv"


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str  # repository under REGISTRY
    tag: str
    description: str
    config: tuple[str, ...] = ()  # umoci config arguments
    debian_packages: tuple[str, ...] = ()  # a Debian root filesystem with these
    tool: str = ""  # a node, object-store or monitoring tool (binaries) whose binary is the image's /<tool>
    binary: str = ""  # that tool directory's file to take, if not the one named like the tool
    binary_path: str = ""  # where the binary goes in the image, if not /<tool>
    base: Recipe | None = None  # an image this one adds a layer to
    requirements: str = ""  # a pinned pip requirements file (``requirements/``) installed in VENV
    project: bool = False  # this checkout's own wheel too (the source tree is an input)
    owned_dirs: tuple[tuple[str, int], ...] = ()  # directories made and owned by that uid (a WORKDIR)

    @property
    def ref(self) -> str:
        return self.ref_with(self.tag)

    def ref_with(self, tag: str) -> str:
        return f"{REGISTRY}/{self.name}:{tag}"

    def key(self) -> str:
        fields = dataclasses.asdict(self) | {"base": self.base.key() if self.base else None}
        for added in ("binary", "binary_path"):  # absent when unset: older images keep their keys
            if not fields[added]:
                del fields[added]
        data = json.dumps([_STEPS_VERSION, DEBIAN_SUITE, fields]).encode() + _inputs(self)
        return hashlib.sha256(data).hexdigest()[:16]


def _tool_dir(tool: str) -> Path:
    """Where a recipe's tool binary is: a node tool's or an object-store server's cache directory
    (its name carries the pinned version)."""
    if tool in binaries.OBJECT_STORE_SERVERS:
        return binaries.object_store_server_cache_dir(tool)
    if tool in binaries.MONITORING_TOOLS:
        return binaries.monitoring_tool_dir(tool)
    return binaries.node_tool_dir(tool)


def _inputs(recipe: Recipe) -> bytes:
    """What else an image is made of: the files its steps read."""
    data = b""
    if recipe.name == "pause":
        data += _pause_source().read_bytes()
    if recipe.tool:
        data += _tool_dir(recipe.tool).name.encode()
    if recipe.requirements:
        data += _PIP_STEP_VERSION.encode() + _requirements(recipe).read_bytes()
    if recipe.project:
        data += _source_digest().encode()
    return data


def _project_root() -> Path:
    root = binaries.repo_root()
    if root is None:
        raise FileNotFoundError("the project's image is built from a source checkout")
    return root


def _source_digest() -> str:
    """What the project's wheel is made of: pyproject.toml, README.md and the package's files."""
    root = _project_root()
    files = [root / "pyproject.toml", root / "README.md"]
    files += sorted(p for p in (root / "src").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def _log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return binaries.cache_root() / "images"


def entry(recipe: Recipe) -> Path:
    """The recipe's cache directory."""
    return cache_dir() / f"{recipe.name}-{recipe.key()}"


def _pause_source() -> Path:
    return gomod.module_dir("k8s", "k8s.io/kubernetes") / "build" / "pause" / "linux" / "pause.c"


def _requirements(recipe: Recipe) -> Path:
    files = importlib_resources.files("mlops_platform.devcluster.realnode").joinpath("requirements")
    return Path(str(files.joinpath(recipe.requirements)))


def archive(recipe: Recipe) -> Path:
    """The recipe's image archive, built (with its base) when its cache entry is missing. One build
    of an image at a time on the machine (``make test`` starts two clusters at once): a second
    caller waits for the first's result."""
    out = entry(recipe)
    tar = out / "image.tar"
    if tar.is_file():
        return tar
    if recipe.base is not None:
        archive(recipe.base)
    cache_dir().mkdir(parents=True, exist_ok=True)
    with (cache_dir() / f".{recipe.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tar.is_file():
            _build(recipe, out, tar)
    return tar


def _build(recipe: Recipe, out: Path, tar: Path) -> None:
    started = time.monotonic()
    _log(f"building {recipe.ref} ({recipe.description}) into {out}")
    shutil.rmtree(out, ignore_errors=True)  # what a build that died left
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".build-") as tmp:
        work = Path(tmp)
        layout, bundle = work / "oci", work / "bundle"
        _start(recipe, layout, bundle)
        rootfs = bundle / "rootfs"
        if recipe.debian_packages:
            _debian_rootfs(rootfs, recipe.debian_packages)
        if recipe.tool in binaries.OBJECT_STORE_SERVERS:
            binaries.object_store_server(recipe.tool)  # built when missing (the node's tools are)
        if recipe.tool in binaries.MONITORING_TOOLS:
            binaries.monitoring()  # built when missing
        if recipe.tool:
            binary = rootfs / (recipe.binary_path or recipe.tool).lstrip("/")
            binary.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(_tool_dir(recipe.tool) / (recipe.binary or recipe.tool), binary)
        if recipe.name == "pause":
            _run("gcc", "-Os", "-static", "-o", str(rootfs / "pause"), str(_pause_source()))
            _run("strip", str(rootfs / "pause"))
        for directory, uid in recipe.owned_dirs:
            made = rootfs / directory.lstrip("/")
            made.mkdir(parents=True, exist_ok=True)
            os.chown(made, uid, 0)
        if recipe.requirements:
            _pip_install(rootfs, _requirements(recipe), work / "wheels", project=recipe.project)
        packages = _packages(rootfs)
        _finish(recipe, layout, bundle, work / "image.tar")
        out.mkdir(parents=True, exist_ok=True)
        (out / "packages.txt").write_text(packages)
        shutil.move(str(layout), out / "oci")
        shutil.move(str(work / "image.tar"), tar)
    _log(f"built {recipe.ref} in {time.monotonic() - started:.0f}s ({tar.stat().st_size / 2**20:.0f} MiB)")
    if recipe.project:
        _prune(recipe)


#: builds of a checkout's own image kept (each source change makes one: 228 MiB each)
KEEP_PROJECT_BUILDS = 3


def _prune(recipe: Recipe) -> None:
    """Forget all but the newest :data:`KEEP_PROJECT_BUILDS` builds of ``recipe``'s image (other
    checkouts' builds among them: a few stay for them)."""
    builds = [p for p in cache_dir().glob(f"{recipe.name}-*") if p.name.rsplit("-", 1)[-1].isalnum()]
    builds = [p for p in builds if p.name.rsplit("-", 1)[0] == recipe.name and p.is_dir()]
    builds.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[KEEP_PROJECT_BUILDS:]:
        shutil.rmtree(old, ignore_errors=True)


def _start(recipe: Recipe, layout: Path, bundle: Path) -> None:
    """An unpacked bundle to build in: the base image's, or an empty one."""
    if recipe.base is not None:
        shutil.copytree(entry(recipe.base) / "oci", layout, symlinks=True)
        _run("umoci", "unpack", "--image", f"{layout}:{recipe.base.tag}", str(bundle))
        return
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:{recipe.tag}")
    _run("umoci", "unpack", "--image", f"{layout}:{recipe.tag}", str(bundle))
    if recipe.debian_packages:
        (bundle / "rootfs").rmdir()  # mmdebstrap makes it


def _finish(recipe: Recipe, layout: Path, bundle: Path, tar: Path) -> None:
    image = f"{layout}:{recipe.tag}"
    _run("umoci", "repack", "--image", image, str(bundle))
    _run("umoci", "config", "--image", image, "--architecture=amd64", "--os=linux", *recipe.config)
    _run("umoci", "gc", "--layout", str(layout))
    _run("skopeo", "copy", "--quiet", f"oci:{image}", f"docker-archive:{tar}:{recipe.ref}")


def _debian_rootfs(rootfs: Path, packages: tuple[str, ...]) -> None:
    _run(
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        "--mode=root",
        f"--include={','.join(packages)}",
        # what an image needs no copy of
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--customize-hook=rm -rf $1/var/cache/apt/* $1/var/lib/apt/lists/*",
        "--customize-hook=: > $1/etc/resolv.conf",
        DEBIAN_SUITE,
        str(rootfs),
    )


def _pip_install(rootfs: Path, requirements: Path, wheels: Path, *, project: bool = False) -> None:
    """The requirements' wheels, fetched by this machine's pip (its index and certificates), installed
    offline and exactly (``--no-deps``: the file pins every package) into a venv of the image's own
    python; the wheel of pip that installs them is run from its file and never lands in the image.
    ``project``: this checkout's wheel too (``pip wheel .``)."""
    pip = [sys.executable, "-m", "pip"]
    _run(*pip, "download", "--quiet", "--no-deps", "--dest", str(wheels), "pip")
    wheel = [*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir"]
    if project:
        _run(*wheel, str(wheels / "own"), str(_project_root()))
    _run(*wheel, str(wheels), "-r", str(requirements))
    inside = rootfs / "tmp" / "wheels"
    shutil.copytree(wheels, inside)
    shutil.copy2(requirements, inside / "requirements.txt")
    pip_wheel = next(inside.glob("pip-*.whl")).name
    own = " ".join(f"/tmp/wheels/own/{w.name}" for w in sorted((inside / "own").glob("*.whl")))
    # SOURCE_DATE_EPOCH: the bytecode pip compiles is checked against its source's hash, not its
    # mtime. Packing rounds an mtime to the second (Go's archive/tar) and the bytecode keeps it
    # truncated, so a timestamp check found 43 % of MLServer's .pyc stale: every process (server and
    # inference worker) compiled those modules again at each start, and could not keep the result
    # (the venv is not its user's): 2.6 CPU-s of imports instead of 1.5.
    install = (
        f"python3 -m venv --without-pip {VENV} && SOURCE_DATE_EPOCH=0"
        f" {VENV}/bin/python /tmp/wheels/{pip_wheel}/pip install"
        " --quiet --no-cache-dir --no-index --no-deps --find-links /tmp/wheels"
        f" -r /tmp/wheels/requirements.txt {own}"
    )
    try:
        _run("chroot", str(rootfs), "sh", "-euc", install)
    finally:
        shutil.rmtree(inside)
    stale = timestamp_checked_bytecode(rootfs / VENV.lstrip("/"))
    if stale:
        raise RuntimeError(f"{len(stale)} .pyc files of the image are checked by mtime, e.g. {stale[0]}")


def timestamp_checked_bytecode(root: Path) -> list[Path]:
    """The ``.pyc`` files under ``root`` that Python validates by their source's mtime (PEP 552's
    flags word is 0): in an image they go stale whenever packing changes an mtime."""
    stale = []
    for pyc in sorted(root.rglob("*.pyc")):
        with pyc.open("rb") as f:
            header = f.read(8)
        if len(header) == 8 and int.from_bytes(header[4:8], "little") == 0:
            stale.append(pyc)
    return stale


def _packages(rootfs: Path) -> str:
    listed = ""
    if (rootfs / "var/lib/dpkg/status").is_file():
        listed += _run("dpkg-query", f"--admindir={rootfs}/var/lib/dpkg", "-W", "-f=${Package}\t${Version}\n")
    if (rootfs / VENV.removeprefix("/") / "bin/python").exists():
        freeze = _run("chroot", str(rootfs), f"{VENV}/bin/python", "-c", _FREEZE)
        listed += "".join(f"pip:{line}\n" for line in freeze.splitlines())
    return listed


_FREEZE = (
    "import importlib.metadata as m;"
    " print(*sorted(f'{d.name}\\t{d.version}' for d in m.distributions()), sep='\\n')"
)


def _run(*args: str) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(args)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    return proc.stdout
