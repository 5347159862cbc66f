"""Turning whatever the user names into a PettingZoo AEC env (docs/running.md, Environments), and carrying it
across processes.

`make_env` accepts module ids, `module:callable` strings, Gymnasium ids, env instances and factories.
`EnvSpec` is the picklable form that spawned processes rebuild the env from: an id with kwargs, or a factory
sent with cloudpickle (as Gymnasium's AsyncVectorEnv sends its env functions). A live env never travels.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

import cloudpickle
import gymnasium
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec

from pzasync.core.global_state import GlobalStateObservations, ParallelGlobalState, StateRequest
from pzasync.core.gym_adapter import GymnasiumAECEnv
from pzasync.core.observed_once import observed_once
from pzasync.core.wrappers import apply_wrappers
from pzasync.errors import ConfigError, EnvSpecError
from pzasync.remote import connect, connect_parallel, is_remote_id
from pzasync.remote.parallel import as_parallel, served_parallel

#: Packages whose env modules are listed by `pzasync envs` and offered as close matches.
ENV_PACKAGES = (
    "pettingzoo.classic",
    "pettingzoo.butterfly",
    "pettingzoo.sisl",
    "pettingzoo.atari",
    "mpe2",
    "pzasync.envs",
)

ACCEPTED = (
    "an env module id ('pettingzoo.classic.connect_four_v3'), a PettingZoo registry id "
    "('classic/connect_four_v3'), 'package.module:callable', a Gymnasium id ('CartPole-v1'), a remote env "
    "('unix:///path', 'tcp://host:port', 'cmd:COMMAND --socket {socket}'), an AEC/parallel/Gymnasium env instance, "
    "or a zero-argument factory returning one"
)

#: The env APIs the actor can step (RunConfig.env_api, `rollout(env_api=...)`): "auto" is the parallel one where the
#: env is simultaneous-move underneath (docs/transitions.md, "The parallel path").
ENV_APIS: tuple[str, ...] = ("auto", "aec", "parallel")

#: The keyword arguments a remote env id takes (docs/remote.md): the reply deadline in seconds, and for cmd:
#: ids how many servers to launch and how many instances each serves (the template's {instances}).
REMOTE_KWARGS = ("timeout_s", "servers", "instances", "restarts")


def known_env_ids() -> list[str]:
    """Module ids of the env modules that the installed packages ship, found without importing them."""
    ids = []
    for package in ENV_PACKAGES:
        try:
            pkg = importlib.import_module(package)
        except ImportError:
            continue
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_") and not info.ispkg and info.name not in ("all_modules",):
                ids.append(f"{package}.{info.name}")
    return ids


def as_aec(env: Any, source: str = "the env") -> AECEnv:
    """Convert an AEC, parallel or Gymnasium env instance to an AEC env; anything else is an error."""
    if isinstance(env, AECEnv):
        return env
    if isinstance(env, ParallelEnv):
        return parallel_to_aec(env)
    if isinstance(env, gymnasium.Env):
        return GymnasiumAECEnv(env)
    raise EnvSpecError(f"{source} returned {type(env).__name__!r}, which is not a PettingZoo or Gymnasium env")


def _registry_ids() -> list[str]:
    try:
        import pettingzoo

        return sorted(set(pettingzoo.aec_registry) | set(pettingzoo.parallel_registry))
    except (ImportError, AttributeError):
        return []


def _close_matches(text: str) -> str:
    modules = known_env_ids()
    short = {c.rsplit(".", 1)[-1]: c for c in modules}
    matches = difflib.get_close_matches(text, modules, n=3, cutoff=0.6)
    matches += [short[m] for m in difflib.get_close_matches(text.rsplit(".", 1)[-1], list(short), n=3, cutoff=0.6)]
    matches += difflib.get_close_matches(text, _registry_ids(), n=2, cutoff=0.6)
    matches = list(dict.fromkeys(matches))[:4]
    return f" Did you mean: {', '.join(matches)}?" if matches else ""


def _from_registry(spec: str, kwargs: dict, parallel: bool = False) -> Any:
    """PettingZoo >= 1.27 registry ids ('classic/connect_four_v3'): the env as registered (its parallel form first
    where `parallel`); None where there is no such registry or id."""
    try:
        import pettingzoo
        from pettingzoo.env_registry.exceptions import PettingZooRegistryError
    except ImportError:
        return None
    from pettingzoo.env_registry.exceptions import FailedToImport

    for kind in ("parallel", "aec") if parallel else ("aec", "parallel"):
        try:
            return pettingzoo.make(kind, spec, **kwargs)
        except FailedToImport as exc:
            raise EnvSpecError(f"env {spec!r} cannot be made here: {exc}") from None
        except PettingZooRegistryError:
            continue
    return None


def _from_string(spec: str, kwargs: dict, parallel: bool = False) -> Any:
    """The env a text names, as its source makes it (AEC, parallel or Gymnasium; a module's `parallel_env()`
    first where `parallel`; a remote env through the parallel API where `parallel`, EnvSpecError where its server
    does not offer it)."""
    if is_remote_id(spec):
        unknown = sorted(set(kwargs) - set(REMOTE_KWARGS))
        if unknown:
            raise EnvSpecError(f"remote env {spec!r} takes only {list(REMOTE_KWARGS)} as keyword arguments, not "
                               f"{unknown}: the env's own arguments belong to the server")
        return (connect_parallel if parallel else connect)(spec, timeout_s=float(kwargs.get("timeout_s", 60.0)),
                                                           instances=kwargs.get("instances"))
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise EnvSpecError(f"cannot import module {module_name!r} of env spec {spec!r}: {exc}") from exc
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise EnvSpecError(f"module {module_name!r} has no callable {attr!r} (env spec {spec!r})")
        return factory(**kwargs)
    if spec in gymnasium.registry:
        return gymnasium.make(spec, **kwargs)
    if "/" in spec:
        env = _from_registry(spec, kwargs, parallel)
        if env is not None:
            return env
        raise EnvSpecError(f"unknown env {spec!r}; expected {ACCEPTED}.{_close_matches(spec)}")
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        missing = exc.name or spec
        if missing != spec and not spec.startswith(missing + "."):
            raise EnvSpecError(f"env {spec!r} needs the package {missing!r}, which is not installed (the env "
                               f"families pzasync is tested with: pip install \"pzasync[envs]\")") from None
        raise EnvSpecError(
            f"unknown env {spec!r} (no module {missing!r}); expected {ACCEPTED}.{_close_matches(spec)}"
        ) from None
    for name in ("parallel_env", "env") if parallel else ("env", "parallel_env"):
        factory = getattr(module, name, None)
        if callable(factory):
            return factory(**kwargs)
    raise EnvSpecError(f"module {spec!r} has neither env() nor parallel_env(); expected {ACCEPTED}")


def _made(spec: Any, kwargs: dict, parallel: bool) -> Any:
    """What `spec` makes, unconverted."""
    if isinstance(spec, str):
        return _from_string(spec, kwargs, parallel)
    if isinstance(spec, (AECEnv, ParallelEnv, gymnasium.Env)):
        if kwargs:
            raise EnvSpecError(f"kwargs {sorted(kwargs)} cannot be applied to an env instance")
        return spec
    if callable(spec):
        # A factory with a `make_parallel` (an env set's, core/envset_env.py) gives its parallel API itself.
        maker = getattr(spec, "make_parallel", None) if parallel else None
        return (maker or spec)(**kwargs)
    raise EnvSpecError(f"cannot make an env from {spec!r} ({type(spec).__name__}); expected {ACCEPTED}")


def make_parallel_env(spec: Any, **kwargs: Any) -> ParallelEnv:
    """The parallel API of the env `spec` names (a module's `parallel_env()`, a `ParallelEnv`, or the parallel env
    under a `parallel_to_aec` conversion); EnvSpecError, naming the env, for an env that has none. PettingZoo's
    `aec_to_parallel` conversion comes back observing each agent once a cycle (`observed_once`)."""
    if isinstance(spec, EnvSpec):
        return spec.make_parallel(**kwargs)
    made = _made(spec, kwargs, parallel=True)
    parallel = as_parallel(made)
    if parallel is None:
        if hasattr(made, "close"):
            made.close()
        name = spec if isinstance(spec, str) else getattr(spec, "__qualname__", type(spec).__name__)
        raise EnvSpecError(f"env {name!r} has no parallel API (it is turn-based, or an AEC env not made by "
                           f"parallel_to_aec): use env_api='aec' (--env-api aec)")
    return observed_once(parallel)


def choose_env_api(spec: EnvSpec, wanted: str = "auto", probe: Any = None,
                   declared: str | None = None) -> tuple[str, str | None]:
    """The env API to step `spec` through ("aec" or "parallel") for `wanted` (`ENV_APIS`), and where "auto" chose
    the parallel path, why (docs/transitions.md, "The parallel path"). "auto" takes the parallel API where the env
    has one (a remote env: where its server offers it, docs/remote.md, "The parallel API"), except where `declared`
    is "aec" (a turn-based game whose `parallel_env()` is only a conversion: `pzasync.recipes.env_api_for`) and
    for envs under a user's wrapper function (it takes what `make` gives it: an AEC env). ConfigError where
    "parallel" is asked of an env without it. `probe`: an env `spec` made already; a remote one's connection says
    what its server offers (else asking means connecting again: for a `cmd:` id, launching a server)."""
    if wanted not in ENV_APIS:
        raise ConfigError(f"option env_api={wanted!r}: must be one of {', '.join(ENV_APIS)}")
    if wanted == "aec" or (wanted == "auto" and declared == "aec"):
        return "aec", None
    if wanted == "auto" and any(":" in wrapper for wrapper in spec.wrappers):
        return "aec", None
    remote = isinstance(spec.source, str) and is_remote_id(spec.source)
    offered = served_parallel(probe) if remote and probe is not None else None
    if offered is None:
        try:
            spec.make_parallel().close()
            offered = True
        except EnvSpecError as exc:
            if wanted == "parallel":
                raise ConfigError(f"option env_api='parallel': {exc}") from None
            offered = False
    elif not offered and wanted == "parallel":
        raise ConfigError(f"option env_api='parallel': env {spec.name!r}: its server does not offer the parallel API "
                          f"(its WELCOME has no \"parallel\": true: a turn-based env, or a server that speaks only "
                          f"the AEC protocol; docs/remote.md, \"The parallel API\"): use env_api='aec' (--env-api aec)")
    if not offered:
        return "aec", None
    served = " (its server offers the parallel API: a cycle of a copy in one request)" if remote else ""
    return "parallel", (f"parallel (the env is simultaneous-move underneath{served}: every live agent's decision of "
                        f"a cycle in one forward per policy; env_api='aec' steps it turn by turn)")


def make_env(spec: Any, **kwargs: Any) -> AECEnv:
    """Build a PettingZoo AEC env from `spec` (see `ACCEPTED`); kwargs go to the env's constructor."""
    if isinstance(spec, EnvSpec):
        return spec.make(**kwargs)
    source = spec if isinstance(spec, str) else getattr(spec, "__name__", "the env factory")
    return as_aec(_made(spec, kwargs, parallel=False), source)


@dataclass
class EnvSpec:
    """A recipe that rebuilds the same env in any process: an id string, or a factory sent with cloudpickle.

    `state`: agents that observe the env's global state beside their own observation (core/global_state.py),
    set by the run plan when a learner's critic reads it. `wrappers`: wrapper specs applied in order to the made
    env, before the global state is added (core/wrappers.py: SuperSuit's by name, or 'module:callable')."""

    source: str | Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)
    state: StateRequest | None = None
    wrappers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.wrappers = tuple(self.wrappers)

    @classmethod
    def of(cls, spec: Any, wrappers: tuple[str, ...] = (), **kwargs: Any) -> EnvSpec:
        """Wrap what the user gave (with `wrappers` after any it has). A live env is refused: it cannot be rebuilt
        in another process."""
        if isinstance(spec, EnvSpec):
            return EnvSpec(spec.source, {**spec.kwargs, **kwargs}, spec.state, (*spec.wrappers, *wrappers))
        if isinstance(spec, (AECEnv, ParallelEnv, gymnasium.Env)):
            raise EnvSpecError(
                f"a live env instance ({type(spec).__name__}) cannot be sent to another process; pass its id or "
                f"a factory such as `lambda: my_env(...)` instead"
            )
        if not isinstance(spec, str) and not callable(spec):
            raise EnvSpecError(f"cannot make an env from {spec!r} ({type(spec).__name__}); expected {ACCEPTED}")
        result = cls(spec, dict(kwargs), None, tuple(wrappers))
        result.check_picklable()
        return result

    @property
    def name(self) -> str:
        if isinstance(self.source, str):
            return self.source
        named = getattr(self.source, "env_name", None)  # an env set's factory names its set
        return named if isinstance(named, str) else getattr(self.source, "__qualname__", type(self.source).__name__)

    @property
    def base_name(self) -> str:
        """The env id that recipes, scoring modes and env APIs go by: `name`, or for an env set the id of its first
        env (a factory's `base_env`)."""
        base = getattr(self.source, "base_env", None)
        return base if isinstance(base, str) else self.name

    @property
    def env_set(self) -> Any:
        """The `EnvSet` this spec plays (core/envset_env.py's `EnvSetSource`), or None."""
        return getattr(self.source, "envset", None)

    def with_stage(self, stage: Any) -> EnvSpec:
        """For an env set: the same spec with its curriculum stage read from `stage` (a number, or an object with
        `curriculum_stage`: the run's counters); any other env is returned as it is."""
        if self.env_set is None:
            return self
        return EnvSpec(self.source.with_stage(stage), dict(self.kwargs), self.state,  # type: ignore[union-attr]
                       self.wrappers)

    def make(self, **overrides: Any) -> AECEnv:
        return self.wrap(make_env(self.source, **{**self.kwargs, **overrides}))

    def make_parallel(self, **overrides: Any) -> ParallelEnv:
        """The env's parallel API (`make_parallel_env`), with the same wrappers (SuperSuit's take parallel envs
        too) and the global state beside the observations of `state`'s agents: for the parallel path
        (docs/transitions.md, "The parallel path")."""
        return self.wrap_parallel(make_parallel_env(self.source, **{**self.kwargs, **overrides}))

    def wrap_parallel(self, env: ParallelEnv) -> Any:
        """What `make_parallel` puts around the parallel env it builds (`wrap`'s counterpart)."""
        if self.wrappers:
            env = apply_wrappers(env, self.wrappers)
        return env if self.state is None else ParallelGlobalState(env, self.state, self.name)

    @property
    def wrapped(self) -> bool:
        """Whether `wrap` and `wrap_parallel` put anything around the env."""
        return bool(self.wrappers) or self.state is not None

    def wrap(self, env: AECEnv) -> AECEnv:
        """What `make` puts around the env it builds (the `wrappers`, then the global state for `state`'s agents):
        for env copies that build their envs another way (remote copies mirror served instances), so they see
        the same env."""
        if self.wrappers:
            env = apply_wrappers(env, self.wrappers)
        return env if self.state is None else GlobalStateObservations(env, self.state, self.name)

    def with_state(self, state: StateRequest | None) -> EnvSpec:
        """The same env with `state`'s agents observing the global state (None: without)."""
        return EnvSpec(self.source, dict(self.kwargs), state, self.wrappers)

    @classmethod
    def of_run(cls, info: dict[str, Any]) -> EnvSpec:
        """The env of a run directory's run.json (its id, kwargs, global-state request and wrappers)."""
        return cls(info["env"], dict(info.get("env_kwargs", {})), StateRequest.from_dict(info.get("env_state")),
                   tuple(info.get("env_wrappers", ())))

    def check_picklable(self) -> None:
        """Fail now, with the reason, if the factory cannot travel to a spawned process."""
        try:
            cloudpickle.dumps(self)
        except Exception as exc:  # noqa: BLE001 - any pickling failure means the same to the user
            raise EnvSpecError(
                f"env factory {self.name!r} cannot be sent to a spawned process: it captures something "
                f"unpicklable ({type(exc).__name__}: {exc}). Build the env inside the factory instead of "
                f"capturing a live env, lock or open file."
            ) from None

    def __reduce__(self) -> tuple:
        if isinstance(self.source, str):
            return (EnvSpec, (self.source, self.kwargs, self.state, self.wrappers))
        return (_load_spec, (cloudpickle.dumps(self.source), self.kwargs, self.state, self.wrappers))


def _load_spec(payload: bytes, kwargs: dict, state: StateRequest | None = None,
               wrappers: tuple[str, ...] = ()) -> EnvSpec:
    return EnvSpec(cloudpickle.loads(payload), kwargs, state, wrappers)
