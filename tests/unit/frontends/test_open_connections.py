"""OpenConnections (serve/frontends/connections.py): one cap for REST and gRPC connections; past it the quietest
connection is evicted, and a newcomer is refused only when every other connection is serving a request."""

from __future__ import annotations

import resource

from serve.frontends.connections import RESERVED_FDS, OpenConnections, default_max_connections


class Fake:
    def __init__(self, quiet: float | None, served: bool = False) -> None:
        self.quiet, self.served = quiet, served
        self.evicted = False

    def quiet_since(self) -> float | None:
        return self.quiet

    def evict(self) -> None:
        self.evicted = True


def test_past_the_cap_the_quietest_connection_is_evicted() -> None:
    connections = OpenConnections(3)
    serving, recent, oldest = Fake(None), Fake(20.0), Fake(10.0)
    for connection in (serving, recent, oldest):
        assert connections.opened(connection)
    newcomer = Fake(30.0)
    assert connections.opened(newcomer)
    assert oldest.evicted and not recent.evicted and not serving.evicted
    assert len(connections) == 3 and connections.evicted == 1


def test_a_connection_never_answered_goes_before_one_that_was() -> None:
    """A client idling between calls since 10.0 stays; the hoarder that connected at 20.0 and never asked goes."""
    connections = OpenConnections(2)
    client, hoarder = Fake(10.0, served=True), Fake(20.0)
    for connection in (client, hoarder):
        assert connections.opened(connection)
    assert connections.opened(Fake(30.0))
    assert hoarder.evicted and not client.evicted
    assert connections.opened(Fake(40.0))  # the newcomer of 30.0 never asked either
    assert not client.evicted


def test_a_newcomer_is_refused_only_when_every_other_connection_is_serving() -> None:
    connections = OpenConnections(2)
    busy = [Fake(None), Fake(None)]
    for connection in busy:
        assert connections.opened(connection)
    assert not connections.opened(Fake(1.0))
    assert len(connections) == 2 and connections.refused == 1 and not any(c.evicted for c in busy)
    connections.closed(busy[0])
    assert connections.opened(Fake(1.0))


def test_the_default_cap_leaves_descriptors_for_the_rest_of_the_server() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = default_max_connections()
    if soft != resource.RLIM_INFINITY:
        assert cap <= soft - RESERVED_FDS and cap <= soft - soft // 8
    assert cap >= 16
