"""deploy/grafana/landb-webhook.json read as Grafana reads it: its panels (those in collapsed rows too) and
their queries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "landb-webhook.json"


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    """Every panel, rows and those inside collapsed rows included."""
    found = []
    for panel in dashboard()["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel."""
    return [(p["title"], t["expr"]) for p in panels() if p["type"] != "row" for t in p["targets"]]


def variables() -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in dashboard()["templating"]["list"]}
