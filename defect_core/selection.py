"""`ModelSelection`: which model a session talks to, as a `(provider, model)` pair.

Owns the pair and its one-string form (`value`: `provider/model`, the value of the model
picker's choices, and the origin stamped on the thinking a model signs).

Invariants:
- A model id alone never selects a model: the same id can be offered by several providers
  (two accounts, two gateways of one model), and a signature made by one of them is not
  valid at another.
- `value` is unambiguous: a provider's name never contains `/` (`config/providers.py` checks
  the names), while a model id may (Bedrock ARNs), so the first `/` splits them.

Why at the bottom of the layers: the configuration resolves the default selection, the
message model's thinking blocks carry the origin, the runtime switches it; none of them may
import another for it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelSelection"]


@dataclass(frozen=True, slots=True)
class ModelSelection:
    provider: str
    """A provider's name: a `[providers.NAME]` table, or a kind implied by the plain keys."""
    model: str

    @property
    def value(self) -> str:
        """`provider/model`: the model picker's value for this choice."""
        return f"{self.provider}/{self.model}"

    @classmethod
    def parse(cls, value: str) -> ModelSelection | None:
        """The selection `value` names (`provider/model`), or None without a provider part."""
        provider, slash, model = value.partition("/")
        if not slash or not provider or not model:
            return None
        return cls(provider, model)

    def __str__(self) -> str:
        return self.value
