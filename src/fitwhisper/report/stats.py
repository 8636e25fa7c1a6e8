"""Figures the page shows beside the table: the paired-bootstrap interval of a difference
in error rate, and error rates by clip duration and by speaker."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

DURATION_EDGES = (0.0, 2.0, 5.0, 10.0, 20.0, 30.0)


def paired_bootstrap(
    errors_a: list[int], errors_b: list[int], units: list[int], n: int = 2000, seed: int = 0
) -> dict:
    """B's error rate minus A's over the same clips, with its 95% interval from resampling
    the clips (both sides resampled together: the pairing removes the clips' own
    difficulty from the spread)."""
    ea, eb, u = (np.asarray(x, dtype=float) for x in (errors_a, errors_b, units))
    diff = float((eb.sum() - ea.sum()) / max(u.sum(), 1.0))
    if len(u) < 2:
        return {"difference": diff, "low": None, "high": None, "clips": len(u)}
    idx = np.random.default_rng(seed).integers(0, len(u), size=(n, len(u)))
    sampled = (eb[idx].sum(1) - ea[idx].sum(1)) / np.maximum(u[idx].sum(1), 1.0)
    low, high = np.percentile(sampled, [2.5, 97.5])
    return {"difference": diff, "low": float(low), "high": float(high), "clips": len(u)}


def by_duration(rows: list[list], columns: tuple[str, ...]) -> list[dict]:
    """Error rate per clip-duration bucket (clips of unknown duration left out)."""
    d, e, u = (columns.index(k) for k in ("duration", "errors", "units"))
    groups: dict[str, list[list]] = defaultdict(list)
    edges = DURATION_EDGES
    for row in rows:
        if row[d] is None:
            continue
        i = next((i for i in range(len(edges) - 1) if row[d] < edges[i + 1]), len(edges) - 1)
        label = f"{edges[i]:g}-{edges[i + 1]:g} s" if i < len(edges) - 1 else f">{edges[-1]:g} s"
        groups[label].append(row)
    order = {f"{a:g}-{b:g} s": i for i, (a, b) in enumerate(zip(edges, edges[1:], strict=False))}
    return [_group(k, groups[k], e, u) for k in sorted(groups, key=lambda k: order.get(k, 99))]


def by_key(rows: list[list], columns: tuple[str, ...], key: str) -> list[dict]:
    """Error rate per value of one column (speaker, language), worst first."""
    k, e, u = (columns.index(c) for c in (key, "errors", "units"))
    groups: dict[str, list[list]] = defaultdict(list)
    for row in rows:
        if row[k] is not None:
            groups[str(row[k])].append(row)
    out = [_group(name, g, e, u) for name, g in groups.items()]
    return sorted(out, key=lambda g: -(g["rate"] or 0))


def _group(label: str, rows: list[list], e: int, u: int) -> dict:
    errors, units = sum(r[e] for r in rows), sum(r[u] for r in rows)
    return {
        "group": label,
        "clips": len(rows),
        "errors": errors,
        "units": units,
        "rate": errors / units if units else None,
    }
