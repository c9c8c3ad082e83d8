"""Routing as an os-ken service (controllers/routing_api.py), wired by os-ken's own AppManager.

The apps are loaded and instantiated as ``controllers.launch`` does, but only
their event loops run (no OpenFlow listener, no job socket): routing's view
reaches aggregation through ``EventRoutingChanged`` and ``get_view``, as in a
controller process, without reading each other's fields.
"""

from __future__ import annotations

import pytest
from os_ken.base import app_manager

from controllers.aggregation import AggregationApp
from controllers.routing import PortInfo, RoutingApp
from controllers.routing_api import (
    ROUTING_SERVICE,
    EventRoutingChanged,
    RoutingUnavailable,
    RoutingView,
    get_view,
)
from emu.registry import wait_for


@pytest.fixture
def apps():
    manager = app_manager.AppManager()
    manager.load_apps(["controllers.routing", "controllers.aggregation"])
    manager.create_contexts()
    made = [manager._instantiate(name, cls) for name, cls in manager.applications_cls.items()]
    manager._update_bricks()
    routing = app_manager.lookup_service_brick(ROUTING_SERVICE)
    agg = next(a for a in made if isinstance(a, AggregationApp))
    loops = (routing, agg)
    for app in loops:
        app_manager.OSKenApp.start(app)  # the event loop only
    yield routing, agg
    for app in loops:
        app_manager.OSKenApp.stop(app)
    for app in made:
        app_manager.unregister_app(app)


def test_routing_registers_as_the_routing_service_with_aggregation_observing(apps) -> None:
    routing, agg = apps
    assert isinstance(routing, RoutingApp) and routing.name == ROUTING_SERVICE
    assert agg.name in routing.get_observers(EventRoutingChanged(None), None)


def test_get_view_and_the_changed_event_carry_routing_s_view(apps) -> None:
    routing, agg = apps
    with routing._lock:  # as routing's handlers do
        routing._apply(
            routing.manager.switch_enter(7, [PortInfo(1, "02:00:00:00:00:01", True)], 100.0)
        )
    version = routing.manager.topology_version
    assert version >= 1
    # Aggregation's handler took the event (it remembers the version it worked on).
    wait_for(lambda: agg._seen_version == version, 5, "aggregation to take routing's event")
    view = get_view(agg)
    assert isinstance(view, RoutingView)
    assert view.version == version and dict(view.switches) == {7: {1: "02:00:00:00:00:01"}}


def test_get_view_without_routing_says_so() -> None:
    class Alone:
        name = "alone"

    with pytest.raises(RoutingUnavailable, match="no 'routing' service"):
        get_view(Alone())
