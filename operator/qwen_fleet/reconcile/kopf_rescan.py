"""Make kopf watch an API that appeared after start-up, when kopf itself missed it.

kopf serves a resource whose CRD is installed after the operator started by re-scanning the API group on each
event of that CRD (``kopf._core.reactor.observation.process_discovered_resource_event``). The apiserver's
discovery can lag behind those events: if the group is not yet listed when the CRD's last event (Established)
comes, kopf's scan finds nothing and no later event asks again, so the operator would never watch, say,
LeaderWorkerSets installed after it (seen in the suite: a multi-node fleet's LeaderWorkerSet was created but its
status never read). The resync asks discovery itself (``Controller.refresh_capabilities``); for every group it
finds served but kopf does not watch, this repeats kopf's own re-scan, under kopf's lock, with kopf's own
functions (kopf 1.45.2 is pinned; ``tests/integration/test_leaderworkerset.py`` covers it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import kopf
from kopf._cogs.clients import scanning
from kopf._cogs.structs import references
from kopf._core.reactor import observation

log = logging.getLogger(__name__)


@dataclass
class KopfHandles:
    """What kopf's observer works with, kept by the operator: created before ``kopf.run`` and passed to it."""

    registry: kopf.OperatorRegistry
    insights: references.Insights
    settings: kopf.OperatorSettings | None = None  # set by the start-up handler


def watched_groups(insights: references.Insights) -> set[str]:
    return {r.group for r in insights.watched_resources | insights.indexed_resources}


async def ensure_watched(handles: KopfHandles, groups: set[str]) -> set[str]:
    """Re-scan each of ``groups`` that kopf does not watch yet; returns the groups it watches afterwards."""
    if handles.settings is None:
        return set()
    added = set()
    for group in sorted(groups - watched_groups(handles.insights)):
        resources = await scanning.scan_resources(groups={group}, settings=handles.settings, logger=log)
        if not resources:
            continue
        async with handles.insights.revised:
            observation.revise_resources(resources=resources, insights=handles.insights,
                                         registry=handles.registry, group=group)
            await handles.insights.backbone.fill(resources=resources)
            handles.insights.revised.notify_all()
        if group in watched_groups(handles.insights):
            added.add(group)
            log.info("now watching the %s API (installed after the operator started)", group)
    return added
