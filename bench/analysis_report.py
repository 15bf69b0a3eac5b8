"""The analysis benchmark's page (``bench.analysis``): ``docs/benchmarks/analysis.md`` from a run's
result (:func:`render`), with the service proxy's section (:func:`render_proxy`) when it has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench import _common as common
from bench.analysis_figures import figures


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def phases_table(base: Mapping[str, Any], an: Mapping[str, Any]) -> str:
    """The baseline's and the analysis' windows, a row each."""
    rows = [
        [label, _f(w["seconds"], 0), f"{w['queries']:.0f}", _f(w["queries_per_second"]),
         _f(w["query_mean_ms"]), _f(w["query_p99_at_most_ms"], 0), _f(w["cpu_per_second"], 3),
         _f(w["rss_mib"], 1), _f(w["reconciles_per_second"]), _f(w["machine_busy_per_second"])]
        for label, w in (("baseline: canaries at 10 %, no analysis", base), ("canaries in analysis", an))
    ]  # fmt: skip
    header = ["phase", "s", "queries to Prometheus", "queries/s", "query mean ms", "query p99 at most ms",
              "operator CPU s/s", "operator RSS MiB", "reconciles/s", "machine busy CPU s/s"]  # fmt: skip
    return common.markdown_table(header, rows)


def summary(r: Mapping[str, Any]) -> list[str]:
    """The page's title, the run's setup and its figures in short."""
    a = r["arguments"]
    f = figures(r)
    base, an = r["baseline"], r["analysis"]
    steps = ", ".join(str(w) for w in r["weights"])
    return [
        "# The canary analysis' extra load (issue 42)",
        "",
        f"`{r['command']}` on {r['machine'].get('cpus', '?')} CPUs ({r['machine'].get('date', '?')}).",
        "",
        f"**{a['count']} InferenceServices** (MLServer runtime, one replica each) on **kwok pods**, each "
        f"with a canary, the `replicas` traffic router. **The metrics are synthetic**: kwok pods serve "
        "nothing, so an exporter of the benchmark's own (127.0.0.1) exposes MLServer's series for every "
        "stable model and candidate, growing at a steady healthy rate, and a real Prometheus "
        f"(on 127.0.0.1, scraping every {a['scrape_interval']:g} s) serves them to the operator "
        "(`--prometheus-url`). The operator runs as its own process (`mlops-platform run`).",
        "",
        f"- analysis: steps {steps} %, each {a['interval']} s, `minRequests: 100`, `errorRatio` "
        "(`max`, `maxAboveStable`) and `latency` (`maxSeconds`, `maxTimesStable`): "
        f"{r['queries_per_measurement']} instant queries per step's measurement;",
        f"- queries per second to Prometheus, canaries in analysis: **{f['queries_per_second']:.2f}** "
        f"({f['measurements_per_second']:.2f} measurements/s; baseline {base['queries_per_second']:.2f});",
        f"- the operator's extra CPU: **{f['extra_cpu_per_second']:.3f} s/s** "
        f"({an['cpu_per_second']:.3f} against {base['cpu_per_second']:.3f}); RSS {an['rss_mib']:.1f} MiB "
        f"against {base['rss_mib']:.1f} MiB ({f['extra_rss_mib']:+.1f} MiB);",
        f"- in the {an['seconds']:.0f} s window: {an['steps_passed']} steps passed, {an['promoted']} "
        f"analyses promoted; phases at its end {an['phases_at_end']}, holds {an['holds_at_end'] or 'none'}.",
        "",
    ]


def finish_lines(fin: Mapping[str, Any]) -> list[str]:
    """Until every analysis ended (``--finish``)."""
    return [
        f"Until every analysis ended: {fin['seconds_from_analysis']:.0f} s from the analyses' apply; "
        f"phases {fin['phases']}, holds {fin['holds'] or 'none'}"
        + (f", **timed out**: {fin['timed_out']}" if fin["timed_out"] else "")
        + f"; over that whole span {fin['whole']['queries_per_second']:.2f} queries/s, operator CPU "
        f"{fin['whole']['cpu_per_second']:.3f} s/s, RSS {fin['whole']['rss_mib']:.1f} MiB.",
        "",
    ]


def render(r: Mapping[str, Any]) -> str:
    lines = [
        *summary(r),
        phases_table(r["baseline"], r["analysis"]),
        "",
        "Queries and their latency are Prometheus' own counts of its `/api/v1/query` handler "
        "(`prometheus_http_requests_total`, `prometheus_http_request_duration_seconds`; p99: the "
        "upper bound of its bucket), over the window only: nothing but the operator queried it then. "
        "CPU and RSS: the operator's `/proc/<pid>`; machine busy: every process (the control plane, "
        "Prometheus, the exporter, the benchmark).",
        "",
    ]
    if "finish" in r:
        lines += finish_lines(r["finish"])
    lines += [
        "Caveat: one run on a shared 2-core machine; the control plane (etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok), Prometheus, the exporter and the operator "
        "share both CPUs. The synthetic series say nothing of a real model server's behaviour: they "
        "give Prometheus the series count and the operator the queries a real fleet of this size would.",
        "",
    ]
    if "proxy" in r:
        lines += render_proxy(r["proxy"])
    return "\n".join(lines)


def render_proxy(p: Mapping[str, Any]) -> list[str]:
    f, a = p["figures"], p["arguments"]
    rows = [
        ["idle (no queries; before and after, pooled)", _f(p["idle"]["seconds"], 0), "0", "-",
         _f(f["apiserver_idle_cpu_per_second"], 3), _f(p["idle"]["client_cpu_per_second"], 3),
         _f(p["idle"]["machine_busy_per_second"]), "-", "-"],
        [f"{f['queries']} queries through the proxy", _f(p["load"]["seconds"], 0), str(f["queries"]),
         _f(f["queries_per_second"]), _f(f["apiserver_load_cpu_per_second"], 3),
         _f(p["load"]["client_cpu_per_second"], 3), _f(p["load"]["machine_busy_per_second"]),
         _f(f["latency_p50_ms"], 1), _f(f["latency_p99_ms"], 1)],
    ]  # fmt: skip
    header = ["window", "s", "queries", "queries/s", "kube-apiserver CPU s/s", "client CPU s/s",
              "machine busy CPU s/s", "latency p50 ms", "latency p99 ms"]  # fmt: skip
    failed = {k: v for k, v in p["outcomes"].items() if k != "ok"}
    return [
        "## Through the API server's service proxy (the default `--prometheus`)",
        "",
        f"`{p['command']}` on {p['machine'].get('cpus', '?')} CPUs ({p['machine'].get('date', '?')}): a "
        "local cluster with its real node (`dev up`'s default) and the monitoring stack (the Prometheus "
        "Operator's Prometheus on the real node, `devcluster.monitoring`); "
        f"{f['queries']} instant queries sent at {a['proxy_rate']:g}/s "
        "(the rate the operator sent for N=100 above) by the operator's own client "
        f"(`promclient.QueryClient`, its defaults: `{p['endpoint']}` through "
        "`/api/v1/namespaces/monitoring/services/http:prometheus-operated:9090/proxy/api/v1/query`, "
        "5 s deadline, 2 retries, 8 in flight). The queries are the analysis' own: the first step's "
        f"measurement ({p['queries_per_measurement']} queries) of each of {a['count']} InferenceServices "
        f"in turn ({p['query_shapes']} distinct). kube-apiserver's CPU from its `/proc/<pid>/stat`, "
        f"over the load and over two idle windows of {a['proxy_idle']:g} s with no queries, one just "
        f"before it and one after (20 s later), pooled ({p['idle_before']['apiserver_cpu_per_second']:.3f} "
        f"and {p['idle_after']['apiserver_cpu_per_second']:.3f} s/s).",
        "",
        f"- kube-apiserver: **{f['apiserver_idle_cpu_per_second']:.3f} CPU s/s idle, "
        f"{f['apiserver_load_cpu_per_second']:.3f} under the queries**: "
        f"+{f['apiserver_extra_cpu_per_second']:.3f} s/s, **{f['apiserver_cpu_ms_per_query']:.2f} ms "
        "of CPU per query**;",
        f"- at N=100 ({f['at_rate']:g} queries/s): **+{f['apiserver_extra_cpu_per_second_at_rate']:.3f} "
        "CPU s/s** of kube-apiserver for the analyses' queries;",
        f"- latency as the client saw it (the proxy and Prometheus): **p50 {f['latency_p50_ms']:.1f} ms, "
        f"p99 {f['latency_p99_ms']:.1f} ms** (max {f['latency_max_ms']:.1f} ms); the client's own CPU "
        f"{f['client_cpu_ms_per_query']:.2f} ms per query;",
        f"- answers: {p['outcomes'].get('ok', 0)} ok, failures {failed or 'none'}.",
        "",
        common.markdown_table(header, rows),
        "",
        "The names queried have no series in this cluster (no InferenceService runs there): Prometheus "
        "evaluates each expression over an empty selection and answers an empty vector, so the answers "
        "are small; what is measured is the proxy's cost per request (authentication, authorization, "
        "the proxied connection to the pod), which does not depend on what the query selects. The "
        "latency includes Prometheus' own evaluation on the real node. One run on the shared 2-core "
        "machine: the real node, Prometheus and the rest of the control plane share both CPUs; machine "
        "busy counts every process on the machine, other work on it included, while the kube-apiserver "
        "and client figures are those processes' own.",
        "",
    ]
