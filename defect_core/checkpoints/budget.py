"""How much checkpoint storage is kept: a size and age budget, oldest pruned first.

Owns `Budget` (the limits) and `plan_prune`, which decides which checkpoints to drop so that
the blobs the rest reference fit in `max_bytes`, and none is older than `max_age_seconds`.
Blobs are shared between checkpoints (equal contents are stored once), so the size of the
kept set is the size of the union of their blobs, counted by reference.

Invariants:
- Oldest first: a checkpoint is dropped only if every older one is dropped too (a rewind
  goes back through consecutive checkpoints, so a gap would make every older one useless).
- The newest checkpoint is kept even when it alone exceeds the size budget (the plan says
  so): the last prompt can always be undone.
- The plan only decides; the caller deletes the checkpoints' records, then sweeps the blobs
  no record references (`BlobStore.sweep`), and reports `PrunePlan.summary()`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_MAX_BYTES = 1024 * 1024 * 1024
DEFAULT_MAX_AGE_SECONDS = 30 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Budget:
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS


@dataclass(frozen=True, slots=True)
class CheckpointUsage:
    """What pruning needs of one checkpoint: its id, age and blobs."""

    key: str
    created_at: float
    digests: frozenset[str]


@dataclass
class PrunePlan:
    drop: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    kept_bytes: int = 0
    freed_bytes: int = 0
    over_budget: bool = False
    """The newest checkpoint alone exceeds the size budget (kept anyway)."""

    def summary(self) -> str:
        if not self.drop:
            text = f"no checkpoint pruned ({self.kept_bytes} bytes kept)"
        else:
            text = (
                f"pruned {len(self.drop)} checkpoint(s), oldest first, freeing "
                f"{self.freed_bytes} bytes ({self.kept_bytes} bytes kept): "
                + "; ".join(f"{k}: {self.reasons[k]}" for k in self.drop)
            )
        if self.over_budget:
            text += "; the newest checkpoint alone exceeds the size budget and is kept"
        return text


def plan_prune(
    usages: Sequence[CheckpointUsage],
    sizes: Mapping[str, int],
    budget: Budget,
    now: float,
) -> PrunePlan:
    """`usages` in any order; `sizes` maps each blob to its bytes on disk."""
    ordered = sorted(usages, key=lambda u: (u.created_at, u.key))
    refs: Counter[str] = Counter()
    for usage in ordered:
        refs.update(usage.digests)
    total = sum(sizes.get(d, 0) for d in refs)
    plan = PrunePlan()
    for i, usage in enumerate(ordered):
        newest = i == len(ordered) - 1
        too_old = now - usage.created_at > budget.max_age_seconds
        too_big = total > budget.max_bytes
        if not (too_old or too_big):
            break
        if newest and not too_old:
            plan.over_budget = True  # the last prompt stays undoable
            break
        plan.drop.append(usage.key)
        plan.reasons[usage.key] = (
            f"older than {budget.max_age_seconds / 86400:g} days"
            if too_old
            else f"over the {budget.max_bytes}-byte budget"
        )
        for digest in usage.digests:
            refs[digest] -= 1
            if refs[digest] == 0:
                del refs[digest]
                freed = sizes.get(digest, 0)
                total -= freed
                plan.freed_bytes += freed
    plan.kept_bytes = total
    return plan
