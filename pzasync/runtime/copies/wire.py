"""What crosses an env worker's pipes: messages pickled with arrays and numpy scalars as raw bytes, and the
`AnsweredDecisions` codec that lets a transition cross without the arrays the actor already holds."""

from __future__ import annotations

import io
import pickle
from typing import Any, Callable

import numpy as np

from pzasync.core.stepper import PendingDecision
from pzasync.core.transitions import Transition


# ---------------------------------------------------------------------------------------------- the wire
# What crosses a worker's pipes each round is mostly small arrays (observations, masks) and numpy scalars
# (actions). Pickled as themselves each costs about 4 us to dump (numpy's generic reduction), and a transition
# as a dataclass instance more: at 8 copies a round that was a tenth of a connect four worker's time. So
# transitions and decisions travel as plain tuples, and arrays and numpy scalars as (dtype, shape, raw bytes),
# rebuilt writable on the other side.
def _array(dtype: str, shape: tuple, data: bytearray) -> np.ndarray:
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _scalar(dtype: str, data: bytes) -> np.generic:
    return np.frombuffer(data, dtype=dtype)[0]


class _WirePickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is np.ndarray and _plain(obj.dtype):
            return _array, (obj.dtype.str, obj.shape, bytearray(obj.tobytes()))
        if isinstance(obj, np.generic) and _plain(obj.dtype):
            return _scalar, (obj.dtype.str, obj.tobytes())
        return NotImplemented  # anything else (object or structured dtypes too) pickles as usual


def _plain(dtype: np.dtype) -> bool:
    """A dtype its `.str` describes fully: no objects, no named fields."""
    return not dtype.hasobject and dtype.names is None and dtype.subdtype is None


def wire_dumps(message: Any) -> bytes:
    """`message` pickled for a worker pipe, with arrays and numpy scalars as raw bytes (see above)."""
    out = io.BytesIO()
    _WirePickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    return out.getvalue()


def _send_wire(conn: Any, message: Any) -> None:
    conn.send_bytes(wire_dumps(message))


def _recv_wire(conn: Any) -> Any:
    return pickle.loads(conn.recv_bytes())


def transition_fields(t: Transition) -> tuple:
    """A transition as the tuple of its fields (`Transition(*fields)` rebuilds it)."""
    return (t.agent, t.obs, t.action, t.reward, t.next_obs, t.terminated, t.truncated, t.action_mask,
            t.next_action_mask, t.extras)


FINAL = "final"  # an "r" event's end: the next observation is in the copy's final slot for the agent


class AnsweredDecisions:
    """The last two answered decisions of each agent in each copy (what was observed, and the action and extras
    that answered it), kept the same way at both ends of a worker's pipe, so that a transition crosses it
    without the arrays the actor already holds.

    A transition usually starts at its agent's previous answered decision and ends at its latest one (its next
    observation is what the agent saw when it acted again): the worker then sends only which entries those are
    (`encode`), and the actor fills them back in from its own copies (`decode`). Both ends record an answer
    before the copy is stepped with it (`answered`) and drop a copy's entries when it starts an episode
    (`forget`); a copy's events reach the actor in the order they happened, so the two stay in step. An entry
    is named only when the transition holds the very objects it recorded, so a wrapper or assembler that
    copies them just sends them in full.
    """

    def __init__(self) -> None:
        self._by_copy: dict[int, dict[str, tuple]] = {}

    def answered(self, decision: PendingDecision, action: Any, extras: dict) -> None:
        """Record that `decision` was answered with `action` (and `extras` to store)."""
        agents = self._by_copy.setdefault(decision.copy, {})
        entry = (decision.obs, decision.mask, action, extras)
        entries = agents.get(decision.agent)
        agents[decision.agent] = (entry,) if entries is None else (entries[-1], entry)

    def forget(self, copy: int) -> None:
        """`copy` starts an episode: no transition will start or end at its earlier decisions."""
        self._by_copy.pop(copy, None)

    def encode(self, t: Transition, copy: int,
               stash: Callable[[int, str, Any, np.ndarray | None], bool] | None = None) -> tuple:
        """The event that carries `t` (emitted by `copy`) over the pipe. A next observation that is no entry
        goes to `stash(copy, agent, obs, mask)` (the final observation slot) when given and it takes it."""
        # an entry, counted from the latest (-1); FINAL: in the final slot; None: sent in full
        start: int | None = None
        end: int | str | None = None
        entries = self._by_copy.get(copy, {}).get(t.agent, ())
        for i, (obs, mask, action, extras) in enumerate(entries, start=-len(entries)):
            if t.obs is obs and t.action_mask is mask and t.action is action and (
                    t.extras is extras or not (t.extras or extras)):  # the assembler stores no extras as {}
                start = i
            if t.next_obs is obs and t.next_action_mask is mask:
                end = i
        if end is None and stash is not None and stash(copy, t.agent, t.next_obs, t.next_action_mask):
            end = FINAL
        if start is None and end is None:
            return ("t", copy, transition_fields(t))
        return ("r", copy, t.agent, start, end, t.reward, t.terminated, t.truncated,
                (t.obs, t.action_mask, t.action, t.extras) if start is None else None,
                (t.next_obs, t.next_action_mask) if end is None else None)

    def decode(self, event: tuple, final: Callable[[int, str], tuple[Any, np.ndarray | None]] | None = None
               ) -> Transition:
        """The transition an "r" event from `encode` stands for, with the entries' objects of this end and
        `final(copy, agent)`'s copy of a final slot."""
        _, copy, agent, start, end, reward, terminated, truncated, began, ended = event
        entries = self._by_copy.get(copy, {}).get(agent, ())
        obs, mask, action, extras = began if start is None else entries[start]
        if end is None:
            next_obs, next_mask = ended
        elif end == FINAL:
            if final is None:
                raise ValueError(f"env copy {copy}: agent {agent!r}'s next observation is in the final slot, but no "
                                 f"final slots were given")
            next_obs, next_mask = final(copy, agent)
        else:
            next_obs, next_mask = entries[end][:2]
        return Transition(agent, obs, action, reward, next_obs, terminated, truncated, mask, next_mask, extras or {})


def _packed(actions: list) -> list | np.ndarray:
    """A round's actions as one array when they are numpy scalars of one dtype (discrete actions, about 1 us
    each to pickle alone); indexing it gives them back as the same scalars. Anything else stays a list."""
    first = actions[0] if actions else None
    if isinstance(first, np.generic) and all(type(a) is type(first) for a in actions):
        packed = np.array(actions)
        if packed.dtype == first.dtype and packed.shape == (len(actions),):
            return packed
    return actions


def enlarge_pipe(conn: Any) -> None:
    """A pipe of 1 MB instead of 64 KB (Linux; elsewhere, or if refused, a no-op): an env worker's answer (a
    round of transitions, hundreds of KB with image observations) fits in one write instead of waking the actor
    once per 64 KB, and a learner host's reports wait there while the runner is busy."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass
