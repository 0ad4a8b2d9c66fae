"""Which cluster an address names when no Ray answered there (collect/cluster_scope.py,
issue 43 item 3). The raylets' own command lines are read from real raylets in
tests/integration/test_two_clusters.py."""

from __future__ import annotations

from slime_hangdoctor.collect.cluster_scope import (
    ClusterScope,
    Raylet,
    address_scope,
    belongs,
    same_gcs,
)


def test_a_gcs_address_scopes_by_its_gcs() -> None:
    assert address_scope("10.0.0.5:6380").gcs_address == "10.0.0.5:6380"
    assert address_scope("10.0.0.5").gcs_address == "10.0.0.5:6379"  # Ray's default GCS port


def test_a_dashboard_url_of_this_machine_where_no_ray_answered_is_no_cluster_here() -> None:
    scope = address_scope("http://127.0.0.1:9")
    assert scope.elsewhere and scope.known
    raylet = Raylet(1, "abc", "session_x", "127.0.0.1:6379")
    assert not belongs(raylet, scope)


def test_what_cannot_be_told_is_an_unknown_scope() -> None:
    for address in (None, "", "auto", "http://203.0.113.7:8265"):  # another host's dashboard
        assert not address_scope(address).known, address


def test_a_loopback_and_an_address_of_this_machine_are_one_gcs_host() -> None:
    assert same_gcs("127.0.0.1:6379", "localhost:6379")
    assert not same_gcs("127.0.0.1:6379", "127.0.0.1:6380")
    assert not same_gcs("127.0.0.1:6379", "203.0.113.7:6379")


def test_the_best_field_both_know_decides() -> None:
    raylet = Raylet(1, "node-a", "session_a", "127.0.0.1:6379")
    # the node id decides over a matching GCS address (two nodes of one cluster on one machine)
    assert not belongs(raylet, ClusterScope(node_id="node-b", gcs_address="127.0.0.1:6379"))
    assert belongs(raylet, ClusterScope(session_name="session_a", gcs_address="127.0.0.1:6380"))
    assert belongs(raylet, ClusterScope())  # nothing to tell them apart by
