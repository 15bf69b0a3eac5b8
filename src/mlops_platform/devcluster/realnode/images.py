"""The images a real node runs, built on this machine and imported into its containerd: no registry.

Each image is a :class:`Recipe` whose inputs (its build steps, pinned package lists, the Debian suite,
this module's version of the steps) hash to its cache key: ``<cache>/images/<name>-<hash>/image.tar``
is built once and imported into every node. The root filesystem is made with mmdebstrap from
Debian's packages (the machine's apt sources), packed as an OCI image by umoci and turned into an
archive containerd imports by skopeo; no image JSON is written by hand. What each image holds is
recorded next to it (``packages.txt``: ``dpkg-query`` of its root filesystem).

- :data:`PAUSE`: the pod sandbox, Kubernetes' own ``build/pause/linux/pause.c`` from the pinned
  ``k8s.io/kubernetes`` module, compiled statically;
- :data:`PYTHON`: Debian bookworm (minbase) with python3 and CA certificates: the base of the test
  workloads and of the images built on it;
- :data:`COREDNS`: the cluster DNS, the pinned CoreDNS binary (static) alone, as upstream's image.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlops_platform.devcluster import binaries, gomod

#: the registry-less name every local image carries (never an upstream image's name)
REGISTRY = "mlops.local"
DEBIAN_SUITE = "bookworm"
_STEPS_VERSION = "1"  # bump when the build steps below change what an image holds


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str  # repository under REGISTRY
    tag: str
    debian_packages: tuple[str, ...] = ()  # empty: no Debian root filesystem (a static binary)
    config: tuple[str, ...] = ()  # umoci config arguments
    description: str = ""
    tool: str = ""  # a node tool (binaries.NODE_TOOLS) whose binary of that name is the image's /<tool>

    @property
    def ref(self) -> str:
        return f"{REGISTRY}/{self.name}:{self.tag}"

    def key(self, extra: bytes = b"") -> str:
        data = json.dumps([_STEPS_VERSION, DEBIAN_SUITE, dataclasses.asdict(self)]).encode() + extra
        return hashlib.sha256(data).hexdigest()[:16]


PAUSE = Recipe(
    "pause",
    "3.10",
    config=("--config.entrypoint=/pause", "--config.user=65535:65535"),
    description="the pod sandbox (Kubernetes' pause.c, static)",
)
PYTHON = Recipe(
    "python",
    f"3.11-{DEBIAN_SUITE}",
    debian_packages=("python3", "ca-certificates"),
    config=(
        "--config.workingdir=/",
        "--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--config.cmd=python3",
    ),
    description="Debian minbase with python3",
)
COREDNS = Recipe(
    "coredns",
    binaries.versions()["COREDNS_VERSION"],
    config=("--config.entrypoint=/coredns", "--config.exposedports=53/udp", "--config.exposedports=53/tcp"),
    description="the cluster DNS (the pinned CoreDNS, static)",
    tool="coredns",
)
ALL = (PAUSE, PYTHON, COREDNS)


def _log(msg: str) -> None:
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return binaries.cache_root() / "images"


def _pause_source() -> Path:
    return gomod.module_dir("k8s", "k8s.io/kubernetes") / "build" / "pause" / "linux" / "pause.c"


def archive(recipe: Recipe) -> Path:
    """The recipe's image archive, built when its cache entry is missing."""
    extra = _pause_source().read_bytes() if recipe is PAUSE else b""
    if recipe.tool:
        extra += binaries.node_tool_dir(recipe.tool).name.encode()
    out = cache_dir() / f"{recipe.name}-{recipe.key(extra)}"
    tar = out / "image.tar"
    if tar.is_file():
        return tar
    started = time.monotonic()
    _log(f"building {recipe.ref} ({recipe.description}) into {out}")
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".build-") as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        packages = ""
        if recipe.debian_packages:
            _debian_rootfs(rootfs, recipe.debian_packages)
            packages = _packages(rootfs)
        else:
            rootfs.mkdir()
        if recipe.tool:
            shutil.copy2(binaries.node_tool_dir(recipe.tool) / recipe.tool, rootfs / recipe.tool)
        if recipe is PAUSE:
            _run("gcc", "-Os", "-static", "-o", str(rootfs / "pause"), str(_pause_source()))
            _run("strip", str(rootfs / "pause"))
        _pack(work, rootfs, recipe)
        out.mkdir(parents=True, exist_ok=True)
        if packages:
            (out / "packages.txt").write_text(packages)
        shutil.move(str(work / "image.tar"), tar)
    _log(f"built {recipe.ref} in {time.monotonic() - started:.0f}s ({tar.stat().st_size / 2**20:.0f} MiB)")
    return tar


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


def _packages(rootfs: Path) -> str:
    return _run("dpkg-query", f"--admindir={rootfs}/var/lib/dpkg", "-W", "-f=${Package}\t${Version}\n")


def _pack(work: Path, rootfs: Path, recipe: Recipe) -> None:
    layout, bundle = work / "oci", work / "bundle"
    image = f"oci:{layout}:{recipe.tag}"
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:{recipe.tag}")
    _run("umoci", "unpack", "--image", f"{layout}:{recipe.tag}", str(bundle))
    (bundle / "rootfs").rmdir()
    rootfs.rename(bundle / "rootfs")
    _run("umoci", "repack", "--image", f"{layout}:{recipe.tag}", str(bundle))
    _run(
        "umoci",
        "config",
        "--image",
        f"{layout}:{recipe.tag}",
        "--architecture=amd64",
        "--os=linux",
        *recipe.config,
    )
    _run("umoci", "gc", "--layout", str(layout))
    _run("skopeo", "copy", "--quiet", image, f"docker-archive:{work / 'image.tar'}:{recipe.ref}")


def _run(*args: str) -> str:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(args)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    return proc.stdout
