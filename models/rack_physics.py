"""Electrical feeds, top-of-rack switches and weight of one rack: figures the evaluator and the optimizer share.

docs/model.md section "Electrical feeds, network and weight" gives the equations.
"""

from __future__ import annotations

import math

from models.base import Frozen
from models.catalog import Catalog, UnknownId
from models.hardware import Chassis, Rack, Switch
from models.errors import InputError


class FeedLoad(Frozen):
    """One power feed of a rack: its load in normal operation and after the failure its redundancy covers."""

    feed: str
    """`A1`, `A2`, ... `B1`, ... under 2N; `F1`, `F2`, ... otherwise."""
    normal_w: float
    """Load on this feed with every feed up (the rack's draw shared evenly by its feeds)."""
    one_lost_w: float | None
    """Load on this feed when the other side (2N) or another feed (N+1) is lost; None without redundancy (a lost
    feed drops the load it carried)."""
    rating_w: float
    """The feed's rating times the continuous-load factor (what it may carry continuously)."""
    exceeded: bool


def downlinks(rack: Rack, switch: Switch) -> int:
    """Ports of one top-of-rack switch left for servers after the uplinks."""
    return switch.ports - rack.uplinks_per_switch


def rack_switch(rack: Rack, catalog: Catalog) -> Switch | None:
    """The rack's top-of-rack switch from the catalog (None when the rack names none); errors name the field."""
    if rack.tor_switch is None:
        return None
    try:
        sw = catalog.switches[rack.tor_switch]
    except UnknownId as e:
        raise InputError(f"tor_switch: {e}") from None
    if downlinks(rack, sw) <= 0:
        raise InputError(f"uplinks_per_switch: {rack.uplinks_per_switch} uplinks leave no server ports on switch "
                         f"{sw.id} ({sw.ports} ports)")
    if sw.height_u > rack.height_u - rack.reserved_u:
        raise InputError(f"tor_switch: switch {sw.id} takes {sw.height_u} U, more than the rack's usable "
                         f"{rack.height_u - rack.reserved_u} U (height_u {rack.height_u} - reserved_u {rack.reserved_u})")
    return sw


def check_server_ports(chassis: Chassis, rack: Rack, switch: Switch | None) -> None:
    """A host's NIC ports land on one top-of-rack switch: they must fit its server ports. A rack-scale system is
    `compute_trays` hosts, each cabled on its own, so the check is per tray."""
    if switch is None or chassis.network_ports == 0:
        return
    d = downlinks(rack, switch)
    per_host = math.ceil(chassis.network_ports / chassis.compute_trays)
    if per_host > d:
        host = "chassis" if chassis.compute_trays == 1 else f"each of the {chassis.compute_trays} trays of"
        raise InputError(
            f"{host} {chassis.id} needs {per_host} switch ports (nics), but switch {switch.id} offers "
            f"{d} server ports ({switch.ports} ports - {rack.uplinks_per_switch} uplinks_per_switch of rack {rack.id})")


def switches_needed(ports: int, rack: Rack, switch: Switch | None) -> int:
    """Top-of-rack switches for `ports` server NIC ports: ceil(ports / server ports per switch)."""
    if switch is None or ports <= 0:
        return 0
    return math.ceil(ports / downlinks(rack, switch))


def feed_loads(rack: Rack, draw_w: float) -> list[FeedLoad]:
    """Per feed: the rack's total draw (servers, switches, reserved gear) in normal operation and after a loss."""
    rating = rack.feed_rating_w
    if rating is None:
        return []
    derated = rating * rack.continuous_load_factor
    normal = draw_w / rack.feeds
    lost = None if rack.redundancy == "none" else draw_w / rack.surviving_feeds
    if rack.redundancy == "2N":
        half = rack.feeds // 2
        names = [f"A{i + 1}" for i in range(half)] + [f"B{i + 1}" for i in range(half)]
    else:
        names = [f"F{i + 1}" for i in range(rack.feeds)]
    tol = 1e-9 * max(1.0, derated)
    return [FeedLoad(feed=n, normal_w=normal, one_lost_w=lost, rating_w=derated,
                     exceeded=max(normal, lost or 0.0) > derated + tol) for n in names]


def planning_power_fraction(chassis: Chassis, rack: Rack) -> float:
    """Share of nameplate power planned for this chassis in this rack (1 unless the rack plans on measured peak
    and the chassis has a measured figure)."""
    if rack.power_basis == "measured_peak" and chassis.measured_peak_fraction is not None:
        return chassis.measured_peak_fraction
    return 1.0


def psu_warning(chassis: Chassis, power_w: float, rack: Rack) -> str | None:
    """Whether a server keeps full power through the failure the rack's redundancy covers. Its supplies are taken
    to be spread evenly over the feeds (under 2N half on each side): after a side is lost it keeps psus // 2."""
    if chassis.psus is None or chassis.psu_w is None:
        return None
    need = chassis.psus_required or chassis.psus
    if need * chassis.psu_w < power_w - 1e-9:
        return (f"chassis {chassis.id}: {need} of {chassis.psus} PSUs x {chassis.psu_w:,.0f} W = "
                f"{need * chassis.psu_w:,.0f} W is below its planned {power_w:,.0f} W")
    if rack.redundancy == "2N":
        left = chassis.psus // 2
        if left * chassis.psu_w < power_w - 1e-9:
            return (f"chassis {chassis.id}: after a 2N side is lost it keeps {left} of {chassis.psus} PSUs = "
                    f"{left * chassis.psu_w:,.0f} W, below its planned {power_w:,.0f} W: it runs power-capped "
                    "(reduced performance) until the side returns")
    return None
