"""Every model of every configured provider: the providers a session may switch between, and
their live model lists.

Owns `ModelCatalog`, the process's cache of each provider's live model list (asked with
`LlmProvider.list_models`, kept for a TTL), and `ProviderSet`, the providers one session's
settings offer (`config.provider_specs`), each built once through the process's builder,
with the models each offers now (`candidates`) and the refresh that asks them all
(`refresh`).

Invariants:
- Nothing here waits on the network unless asked to `refresh`: `candidates` answers from
  what is cached, else from the configured lists (`LlmProvider.models`), so `session/new`
  never waits on a listing (docs/architecture.md, rule 6). The front end refreshes after it
  has answered, and tells the editor when the lists changed.
- A provider that cannot list (offline, unauthorised, no credentials, a service error) is
  answered with its configured list, logged once per attempt, and asked again only after
  `retry_after` seconds: a broken network costs one failed call per provider, not one per
  session.
- One listing per provider at a time: concurrent refreshes of one provider share one call.

Why a room of its own: the registry builds one provider; which providers a session offers,
and what each offers right now, is a question about all of them together.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from defect_core.config import ProviderSpec, Settings, provider_spec, provider_specs
from defect_core.log import get_logger
from defect_core.providers.base import LlmProvider, ModelInfo, ProviderError

__all__ = ["DEFAULT_TTL", "ModelCatalog", "ProviderSet"]

log = get_logger("defect.models")

DEFAULT_TTL = 600.0
"""Seconds a live list is trusted before the next refresh asks again."""
RETRY_AFTER = 60.0
"""Seconds before a provider that could not list is asked again."""

Clock = Callable[[], float]


@dataclass
class _Entry:
    provider: LlmProvider
    """Kept so the id the entry is filed under cannot be reused by another object."""
    models: list[ModelInfo]
    live: bool
    expires: float


class ModelCatalog:
    """Each provider's live model list, cached per process."""

    def __init__(
        self,
        ttl: float = DEFAULT_TTL,
        retry_after: float = RETRY_AFTER,
        clock: Clock = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._retry_after = retry_after
        self._clock = clock
        self._entries: dict[int, _Entry] = {}
        self._asking: dict[int, anyio.Event] = {}

    def known(self, provider: LlmProvider) -> list[ModelInfo]:
        """What `provider` offers, as far as is known without asking: the last list it gave
        (even a stale one), else its configured list."""
        entry = self._entries.get(id(provider))
        return list(entry.models) if entry is not None else provider.models()

    async def refresh(self, provider: LlmProvider) -> list[ModelInfo]:
        """`provider`'s list: the cached one while fresh, else asked now (the configured list
        when it cannot say)."""
        key = id(provider)
        while key in self._asking:
            await self._asking[key].wait()
        entry = self._entries.get(key)
        if entry is not None and entry.expires > self._clock():
            return list(entry.models)
        self._asking[key] = done = anyio.Event()
        try:
            try:
                models = await provider.list_models()
                live = True
            except ProviderError as err:
                log.info(
                    "model_list_unavailable",
                    provider=provider.name,
                    error=err.message,
                    using="the configured models",
                )
                models, live = provider.models(), False
            except Exception:  # a bug must not cost the session its picker
                log.exception("model_list_failed", provider=provider.name)
                models, live = provider.models(), False
            if not models:  # a service that lists nothing usable: keep the configured list
                models, live = provider.models(), False
            wait = self._ttl if live else self._retry_after
            self._entries[key] = _Entry(provider, models, live, self._clock() + wait)
            return list(models)
        finally:
            del self._asking[key]
            done.set()


class ProviderSet:
    """The providers one session may use, built on first use, and their model lists."""

    def __init__(
        self,
        settings: Settings,
        build: Callable[[ProviderSpec], LlmProvider],
        catalog: ModelCatalog,
    ) -> None:
        self._settings = settings
        self._open = True
        """Whether a kind the picker does not list may join (not for `single`)."""
        self._specs = {spec.name: spec for spec in provider_specs(settings)}
        self._build = build
        self._catalog = catalog
        self._built: dict[str, LlmProvider] = {}

    @classmethod
    def single(cls, provider: LlmProvider, catalog: ModelCatalog) -> ProviderSet:
        """Exactly one, already built provider (library use, tests)."""
        spec = ProviderSpec(provider.name, "scripted", "given")
        providers = cls(Settings(), lambda _spec: provider, catalog)
        providers._specs = {provider.name: spec}
        providers._built = {provider.name: provider}
        providers._open = False
        return providers

    @property
    def names(self) -> tuple[str, ...]:
        """The providers' names, the default first."""
        return tuple(self._specs)

    def get(self, name: str) -> LlmProvider | None:
        """The provider called `name`, built once; None when the settings have none. A kind
        the picker does not list (a session stored on it) joins the set when asked for."""
        if name not in self._specs:
            spec = provider_spec(self._settings, name) if self._open else None
            if spec is None or spec.name != name:
                return None
            self._specs[name] = spec
        if name not in self._built:
            self._built[name] = self._build(self._specs[name])
        return self._built[name]

    def default(self) -> LlmProvider:
        provider = self.get(self.names[0])
        assert provider is not None
        return provider

    def candidates(self) -> list[tuple[str, list[ModelInfo]]]:
        """Each provider's name and the models it offers, as far as is known now."""
        out: list[tuple[str, list[ModelInfo]]] = []
        for name in self.names:
            provider = self.get(name)
            assert provider is not None
            out.append((name, self._catalog.known(provider)))
        return out

    def model_info(self, name: str, model: str) -> ModelInfo | None:
        provider = self.get(name)
        if provider is None:
            return None
        for info in [*self._catalog.known(provider), *provider.models()]:
            if info.id == model:
                return info
        return None

    async def refresh(self) -> bool:
        """Ask every provider for its list (concurrently); True when any list changed."""
        before = self.candidates()
        async with anyio.create_task_group() as tg:
            for name in self.names:
                provider = self.get(name)
                assert provider is not None
                tg.start_soon(self._catalog.refresh, provider)
        return self.candidates() != before
