"""Child of ``runtime_rss cache``: one ``Informer`` of the benchmark's ConfigMaps in a fresh process.

Run as ``python -E -s -m bench.cache_child KUBECONFIG NAMESPACE LABEL_SELECTOR VARIANT PAGE_SIZE`` from
the repository root (``VARIANT``: ``stripped``, ``kept`` or ``stripped-per-page``). Everything it
imports is loaded before the post-import baseline is read, so only the informer's cache counts. Prints
``RESULT <JSON of a CacheRun>``.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import resource
import sys
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench import _common as common

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client


@dataclass(frozen=True)
class CacheRun:
    """What one child measured. Bytes unless named otherwise."""

    baseline_rss: int  # VmRSS after the imports, the client and one warm-up LIST, before the informer
    rss: int  # VmRSS after sync + gc.collect()
    hwm: int  # VmHWM then
    rss_after_malloc_trim: int  # VmRSS after malloc_trim(0); -1 when there is no libc.so.6
    ru_maxrss: int
    objects: int
    objects_with_managed_fields: int
    deep_size: int  # sys.getsizeof of every distinct object reachable from the store's items
    sync_seconds: float


def deep_size(root: object) -> int:
    """Bytes of every distinct object reachable from ``root`` (dict/list/tuple/set/str/int/...)."""
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list | tuple | set | frozenset):
            stack.extend(o)
    return total


def strip_each_page(client: Client) -> None:
    """Bench-only diagnostic, NOT the runtime's behaviour: strip every LIST page as it arrives.

    The runtime transforms after the whole LIST; this patch strips before the informer accumulates
    all pages.
    """
    from mlops_platform.runtime.caching import transforms

    list_ = client.list

    async def list_stripped(*a: Any, **kw: Any) -> dict[str, Any]:
        page = await list_(*a, **kw)
        for o in page.get("items") or ():
            transforms.strip_managed_fields(o)
        return page

    client.list = list_stripped  # type: ignore[method-assign]


def malloc_trim_rss() -> int:
    """VmRSS after ``malloc_trim(0)`` (glibc gives free heap pages back), or -1 without libc.so.6."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        return -1
    return common.read_proc().rss


async def measure(kubeconfig: str, namespace: str, selector: str, variant: str, page_size: int) -> CacheRun:
    from mlops_platform.runtime.caching import informer as rinformer
    from mlops_platform.runtime.caching import transforms
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    client = rclient.Client.from_kubeconfig(kubeconfig)
    # warm-up: TLS handshake, connection pool, first response buffers are not the cache's cost
    await client.list(resources.CONFIG_MAP, namespace, label_selector=selector, limit=1)
    gc.collect()
    base = common.read_proc()
    if variant == "stripped-per-page":
        strip_each_page(client)
    informer = rinformer.Informer(
        client,
        resources.CONFIG_MAP,
        namespace=namespace,
        label_selector=selector,
        transform=None if variant == "kept" else transforms.strip_managed_fields,
        page_size=page_size,
    )
    t0 = time.perf_counter()
    informer.start()
    await informer.wait_for_sync(900)
    sync_seconds = time.perf_counter() - t0
    gc.collect()
    after = common.read_proc()
    trimmed = malloc_trim_rss()
    objects = informer.store.list()
    with_mf = sum(1 for o in objects if o.get("metadata", {}).get("managedFields"))
    deep = deep_size(informer.store._items)
    await informer.stop()
    await client.close()
    return CacheRun(
        baseline_rss=base.rss,
        rss=after.rss,
        hwm=after.hwm,
        rss_after_malloc_trim=trimmed,
        ru_maxrss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        objects=len(objects),
        objects_with_managed_fields=with_mf,
        deep_size=deep,
        sync_seconds=sync_seconds,
    )


def main(argv: list[str]) -> None:
    kubeconfig, namespace, selector, variant, page_size = argv
    run = asyncio.run(measure(kubeconfig, namespace, selector, variant, int(page_size)))
    print("RESULT " + json.dumps(asdict(run)))


if __name__ == "__main__":
    main(sys.argv[1:])
