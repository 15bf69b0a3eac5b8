"""bench.scale: the API server's watch events per resource, from its /metrics, between two reads."""

from __future__ import annotations

from bench import scale

BEFORE = """\
# HELP apiserver_watch_events_total [ALPHA] Number of events sent in watch clients
apiserver_watch_events_total{group="",resource="pods",version="v1"} 10
apiserver_watch_events_total{group="apps",resource="deployments",version="v1"} 4
apiserver_watch_events_sizes_sum{group="",resource="pods",version="v1"} 10000
apiserver_watch_events_sizes_sum{group="apps",resource="deployments",version="v1"} 2000
"""
AFTER = """\
apiserver_watch_events_total{group="",resource="pods",version="v1"} 110
apiserver_watch_events_total{group="apps",resource="deployments",version="v1"} 4
apiserver_watch_events_total{group="discovery.k8s.io",resource="endpointslices",version="v1"} 30
apiserver_watch_events_sizes_sum{group="",resource="pods",version="v1"} 410000
apiserver_watch_events_sizes_sum{group="apps",resource="deployments",version="v1"} 2000
apiserver_watch_events_sizes_sum{group="discovery.k8s.io",resource="endpointslices",version="v1"} 30000
"""


def test_watch_events_are_counted_per_resource_and_only_what_was_sent_in_between() -> None:
    before, after = scale.watch_events(BEFORE), scale.watch_events(AFTER)
    assert after["pods"] == (110, 410000)  # the core group: the resource alone
    assert after["apps/deployments"] == (4, 2000)
    got = scale.watch_diff(after, before)
    # the largest first; a resource with no new event is left out
    assert list(got.items()) == [("pods", [100, 400000]), ("discovery.k8s.io/endpointslices", [30, 30000])]


SERVED_BEFORE = """\
apiserver_request_total{code="201",resource="services",subresource="",verb="APPLY"} 10
apiserver_request_total{code="200",resource="inferenceservices",subresource="status",verb="APPLY"} 5
apiserver_request_duration_seconds_sum{resource="services",subresource="",verb="APPLY"} 2.5
apiserver_request_duration_seconds_sum{resource="inferenceservices",subresource="status",verb="APPLY"} 0.25
"""
SERVED_AFTER = """\
apiserver_request_total{code="201",resource="services",subresource="",verb="APPLY"} 30
apiserver_request_total{code="409",resource="services",subresource="",verb="APPLY"} 2
apiserver_request_total{code="200",resource="inferenceservices",subresource="status",verb="APPLY"} 5
apiserver_request_total{code="200",resource="pods",subresource="",verb="WATCH"} 3
apiserver_request_duration_seconds_sum{resource="services",subresource="",verb="APPLY"} 12.5
apiserver_request_duration_seconds_sum{resource="inferenceservices",subresource="status",verb="APPLY"} 0.25
"""


def test_the_requests_served_are_counted_per_verb_and_resource_with_their_seconds() -> None:
    before, after = scale.server_requests(SERVED_BEFORE), scale.server_requests(SERVED_AFTER)
    assert after["APPLY services"] == (32, 12.5)  # every code
    assert after["APPLY inferenceservices/status"] == (5, 0.25)
    assert after["WATCH pods"] == (3, 0.0)  # a count without a duration sample
    got = scale.server_requests_diff(after, before)
    # the most handler seconds first; a kind with no new request is left out
    assert list(got.items()) == [("APPLY services", [22, 10.0]), ("WATCH pods", [3, 0.0])]
