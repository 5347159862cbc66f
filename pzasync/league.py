"""Self-play with a league: who a learning unit plays against, drawn per episode, and ratings from the games.

`RunConfig.league` maps a learning unit (an agent, or an agent group) to an opponent mix, e.g.
`{"players": {"latest": 0.5, "snapshot": 0.4, "negamax,depth=2": 0.1}}` (`"*"`: every learning unit). At the
start of every episode the actor asks the `League` for the match:

- ``latest``: nothing changes; every seat acts with its own unit's newest policy and every seat's
  transitions are recorded (plain self-play for a group, plain independent learning otherwise).
- ``snapshot``: one seat of the unit (the *trainee*, drawn uniformly among its members unless
  `league_trainee_weights` weighs them) acts with the
  newest policy; every other seat acts with a frozen past policy of *its own* unit, drawn from that unit's
  snapshot pool. Only the trainee's transitions are recorded.
- any non-learning player spec (``"one_ply"``, ``"negamax,depth=2"``, ``"random"``, ``"mypkg.mod:fn"``): the
  other seats are that player; only the trainee's transitions are recorded.

Snapshots are copies of the vector the actor already holds (its local copy of the unit's policy slot), taken
at episode boundaries every `league_snapshot_every` of the unit's decisions and kept in a pool of at most
`league_pool_size` per unit (oldest evicted); with a run directory each one is also saved as
``league/<unit>-v<version>.npy`` (evicted files are deleted). Loading a snapshot into an opponent module
happens once per episode, never per decision.

Every non-``latest`` game updates Glicko-1 ratings of the trainee's unit (as one player whose strength
drifts) and of the opponent (a snapshot, or a scripted player); ratings are logged to ``league.jsonl`` and
plotted to ``league.png``.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pzasync.learners import resolve_learner, vector_to_policy
from pzasync.runtime.rundir import pyplot
from pzasync.specs import LATEST, SNAPSHOT, parse_mix, scripted_spec


# ------------------------------------------------------------------------------------------ ratings
@dataclass
class Rating:
    """A Glicko-1 rating: `value` and its deviation `rd` (95% interval about value ± 2 rd)."""

    value: float = 1500.0
    rd: float = 350.0
    games: int = 0


_Q = math.log(10) / 400
#: league.jsonl gets the ratings every RATINGS_LOG_GAMES rated games, but at most once per RATINGS_LOG_EVERY_S
#: seconds: a row holds every pooled snapshot's rating, and at thousands of games a minute (the default run's
#: 8 env copies) a row per 20 games made the file grow by 6 MB a minute.
RATINGS_LOG_GAMES, RATINGS_LOG_EVERY_S = 20, 1.0


def _g(rd: float) -> float:
    return 1.0 / math.sqrt(1.0 + 3.0 * _Q * _Q * rd * rd / math.pi ** 2)


class Ratings:
    """Glicko-1 ratings updated one game at a time (each game its own rating period).

    A learner keeps improving, so before each of its games its deviation grows by `drift` (Glicko's c),
    which keeps its rating responsive; frozen snapshots and scripted players do not drift.
    """

    def __init__(self, drift: float = 15.0) -> None:
        self.players: dict[str, Rating] = {}
        self.drift = drift

    def get(self, player: str) -> Rating:
        return self.players.setdefault(player, Rating())

    def add(self, player: str, like: str | None = None) -> None:
        """A new player, starting from `like`'s rating (a snapshot starts as its learner did)."""
        source = self.players.get(like) if like else None
        self.players[player] = Rating(source.value, source.rd) if source else Rating()

    def game(self, learner: str, opponent: str, score: float) -> None:
        """Record one game: `score` is 1 (learner won), 0.5 (draw) or 0 (learner lost)."""
        a, b = self.get(learner), self.get(opponent)
        a.rd = min(350.0, math.sqrt(a.rd ** 2 + self.drift ** 2))
        new_a = self._update(a, b, score)
        new_b = self._update(b, a, 1.0 - score)
        (a.value, a.rd), (b.value, b.rd) = new_a, new_b
        a.games += 1
        b.games += 1

    @staticmethod
    def _update(me: Rating, other: Rating, score: float) -> tuple[float, float]:
        g = _g(other.rd)
        expected = 1.0 / (1.0 + 10 ** (-g * (me.value - other.value) / 400))
        d2 = 1.0 / (_Q * _Q * g * g * expected * (1 - expected))
        denom = 1.0 / (me.rd ** 2) + 1.0 / d2
        value = me.value + _Q / denom * g * (score - expected)
        return value, max(30.0, math.sqrt(1.0 / denom))

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {p: {"rating": round(r.value, 1), "rd": round(r.rd, 1), "games": r.games}
                for p, r in self.players.items()}


# ------------------------------------------------------------------------------------------ snapshot pool
@dataclass
class Snapshot:
    """A frozen copy of a unit's acting policy."""

    unit: str
    version: int
    agent_steps: int
    vector: np.ndarray

    @property
    def name(self) -> str:
        return f"{self.unit}@v{self.version}"


class SnapshotPool:
    """At most `size` snapshots per unit, oldest evicted; mirrored to `directory` when given."""

    def __init__(self, size: int, directory: Path | None = None) -> None:
        self.size = size
        self.directory = directory
        self.pools: dict[str, deque[Snapshot]] = {}
        self.taken = 0
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    def add(self, snapshot: Snapshot) -> Snapshot | None:
        """Keep `snapshot`; returns the one evicted to make room, if any."""
        pool = self.pools.setdefault(snapshot.unit, deque())
        if pool and pool[-1].version == snapshot.version:
            return None  # nothing new was published since the last snapshot
        pool.append(snapshot)
        self.taken += 1
        if self.directory is not None:
            np.save(self.directory / f"{snapshot.name.replace('@', '-')}.npy", snapshot.vector)
        if len(pool) <= self.size:
            return None
        evicted = pool.popleft()
        if self.directory is not None:
            (self.directory / f"{evicted.name.replace('@', '-')}.npy").unlink(missing_ok=True)
        return evicted

    def of(self, unit: str) -> deque[Snapshot]:
        return self.pools.get(unit, deque())


# ------------------------------------------------------------------------------------------ the league
@dataclass
class Match:
    """Who played whom in one episode (recorded in episodes.jsonl under "match")."""

    unit: str | None
    kind: str
    trainee: str | None = None
    #: Seat -> what acted there, for the seats that did not act with their own newest policy.
    opponents: dict[str, str] = field(default_factory=dict)
    #: Seat -> the policy acting there instead (not recorded in episodes.jsonl): what the actor installs.
    overrides: dict[str, Any] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "kind": self.kind, "trainee": self.trainee, "opponents": self.opponents}


class League:
    """Draws each episode's match and the opponent policies for the actor's seats, keeps pool and ratings.

    With several env copies (RunConfig.envs_per_actor) each copy has its own match. Each pooled snapshot is
    loaded into one module, built the first time it is drawn and dropped when the pool evicts it, so every
    copy and seat facing the same snapshot shares it and the actor batches their decisions together."""

    def __init__(self, plan: Any, acting: dict[str, Any], seed: int, run_dir: Any = None) -> None:
        config = plan.config
        self.plan = plan
        self.acting = acting
        self.rng = np.random.default_rng(seed + 4242)
        self.mixes = {unit: parse_mix(unit, mix) for unit, mix in plan.league.items()}
        self._draw_tables = {unit: (list(mix), np.cumsum(list(mix.values()))) for unit, mix in self.mixes.items()}
        envset = getattr(plan, "env_set", None)
        #: Per step of an env set's curriculum: the draw tables of the opponent it sets for every unit of the
        #: league (None: the league's own mixes), chosen by the run's curriculum stage at each episode start.
        self._stage_tables = [None if opponent is None else {unit: ([opponent], np.ones(1)) for unit in self.mixes}
                              for opponent in (envset.opponents if envset is not None else [])]
        self.snapshot_every = int(config.league_snapshot_every)
        self.run_dir = run_dir
        self.pool = SnapshotPool(int(config.league_pool_size),
                                 Path(run_dir.path) / "league" if run_dir is not None else None)
        self.ratings = Ratings()
        self.members = {u: p.seats for u, p in plan.units.items()}
        #: Per unit with RunConfig.league_trainee_weights for its seats: cumulative trainee probabilities.
        self._trainee_tables: dict[str, np.ndarray] = {}
        for unit in self.mixes:
            weights = [float(config.league_trainee_weights.get(a, 1.0)) for a in self.members[unit]]
            if len(set(weights)) > 1:
                self._trainee_tables[unit] = np.cumsum(weights) / sum(weights)
        self.learning_units = [u for u, p in plan.units.items() if p.learns]
        for unit in self.learning_units:
            self.ratings.add(unit)
        self._next_snapshot = dict.fromkeys(self.learning_units, 0)
        #: Per pooled snapshot (by name): the module it is loaded into, built when first drawn.
        self._snapshot_modules: dict[str, Any] = {}
        #: Per unit: the snapshot drawn last and how many more snapshot seats it serves (`_draw_snapshot`).
        self.copies = int(config.envs_per_actor)
        self._sticky: dict[str, tuple[Snapshot | None, int]] = {}
        #: Per (seat, kind): a scripted player's policy.
        self._scripted: dict[tuple[str, str], Any] = {}
        self.games: dict[str, dict[str, int]] = {u: {} for u in self.mixes}
        self._rating_rows: list[dict] = []
        self._start = time.monotonic()
        self._last_rating_row = -math.inf

    # ------------------------------------------------------------------ episode boundaries (actor thread)
    def start_episode(self, agent_steps: int) -> Match:
        """Draw the match of a new episode (in any env copy); its `overrides` are the seats' opponent policies."""
        self._maybe_snapshot(agent_steps)
        units = list(self.mixes)
        self.rng.shuffle(units)
        tables = self._tables()
        for unit in units:
            kinds, cumulative = tables[unit]
            kind = kinds[min(int(np.searchsorted(cumulative, self.rng.random(), side="right")), len(kinds) - 1)]
            if kind == LATEST:
                continue
            match = self._draw(unit, kind)
            if match is not None:
                return match
        return Match(None, LATEST)

    def _tables(self) -> dict[str, tuple[list[str], np.ndarray]]:
        """The draw tables of this episode: the curriculum step's opponent where it sets one, else the mixes."""
        if self._stage_tables:
            stats = self.plan.stats
            stage = stats.curriculum_stage if stats is not None and not stats.closed else 0
            step = self._stage_tables[min(stage, len(self._stage_tables) - 1)]
            if step is not None:
                return step
        return self._draw_tables

    def _draw(self, unit: str, kind: str) -> Match | None:
        members = self.members[unit]
        trainee = self._draw_trainee(unit, members)
        opponents: dict[str, str] = {}
        overrides: dict[str, Any] = {}
        for seat, a in self.acting.items():
            if seat == trainee:
                continue
            if kind == SNAPSHOT:
                seat_unit = a.unit
                pool = self.pool.of(seat_unit)
                if not pool:
                    if seat_unit == unit:
                        return None  # no past self yet: this episode is plain self-play
                    continue  # a non-learning (or not yet snapshotted) seat keeps its own policy
                snapshot = self._draw_snapshot(seat_unit, pool)
                overrides[seat] = self._snapshot_module(seat, snapshot)
                opponents[seat] = snapshot.name
            else:
                overrides[seat] = self._scripted_policy(seat, kind)
                opponents[seat] = kind
        return Match(unit, kind, trainee, opponents, overrides)

    def _draw_trainee(self, unit: str, members: list[str]) -> str:
        """The seat that trains in a non-`latest` game: uniform, or by RunConfig.league_trainee_weights."""
        cumulative = self._trainee_tables.get(unit)
        if cumulative is None:
            return members[int(self.rng.integers(len(members)))]
        return members[min(int(np.searchsorted(cumulative, self.rng.random(), side="right")), len(members) - 1)]

    def _draw_snapshot(self, unit: str, pool: deque[Snapshot]) -> Snapshot:
        """A snapshot of `unit`, uniformly from its pool. With several env copies a drawn snapshot serves the
        next `envs_per_actor` snapshot seats of the unit, so the copies facing it batch their decisions
        together (one forward, not one per copy); each snapshot stays equally likely."""
        held, uses = self._sticky.get(unit, (None, 0))
        if held is None or uses <= 0 or not any(s is held for s in pool):  # evicted meanwhile
            held, uses = pool[int(self.rng.integers(len(pool)))], self.copies
        self._sticky[unit] = (held, uses - 1)
        return held

    def _snapshot_module(self, seat: str, snapshot: Snapshot) -> Any:
        module = self._snapshot_modules.get(snapshot.name)
        if module is None:
            module = self.plan.agents[seat].build_policy(self.plan.config.seed + 77)  # any seat of its unit fits
            vector_to_policy(snapshot.vector, module)
            self._snapshot_modules[snapshot.name] = module
        module.on_actor_steps(self.acting[seat].count.steps)  # explore like the trainee's current schedule
        return module

    def _scripted_policy(self, seat: str, kind: str) -> Any:
        key = (seat, kind)
        if key not in self._scripted:
            cls, options = resolve_learner(scripted_spec(kind), seat)
            options = cls.validate_config(seat, options)
            policy = cls.build_policy(self.acting[seat].layout, options)
            policy.seed(int(self.rng.integers(2**31)))
            self._scripted[key] = policy
        return self._scripted[key]

    def end_episode(self, summary: Any, match: Match) -> dict[str, Any]:
        """Score the finished match (ratings, per-opponent game counts); returns it for episodes.jsonl."""
        record = match.as_dict()
        if match.unit is not None and match.trainee is not None:
            ret = summary.returns.get(match.trainee, 0.0)
            score = 1.0 if ret > 0 else 0.0 if ret < 0 else 0.5
            opponent = self._rated_opponent(match)
            self.ratings.game(match.unit, opponent, score)
            record["score"] = score
            counts = self.games[match.unit]
            counts[match.kind] = counts.get(match.kind, 0) + 1
            if sum(counts.values()) % RATINGS_LOG_GAMES == 0 and self.run_dir is not None:
                now = time.monotonic()
                if now - self._last_rating_row >= RATINGS_LOG_EVERY_S:
                    self._last_rating_row = now
                    self._rating_rows.append({"wall_s": round(now - self._start, 3),
                                              "ratings": self.ratings.as_dict()})
                    self.flush()
        elif match.unit is None:
            for unit in self.mixes:
                self.games[unit][LATEST] = self.games[unit].get(LATEST, 0) + 1
        return record

    def _rated_opponent(self, match: Match) -> str:
        names = sorted(set(match.opponents.values()))
        return names[0] if len(names) == 1 else "+".join(names)

    def _maybe_snapshot(self, agent_steps: int) -> None:
        for unit in self.learning_units:
            seats = [a for a in self.acting.values() if a.unit == unit]
            steps = sum(a.count.steps for a in seats)
            if steps < self._next_snapshot[unit] or seats[0].local.vector is None or seats[0].local.version <= 0:
                continue
            self._next_snapshot[unit] = steps + self.snapshot_every
            newest = seats[0].local  # the unit's one policy
            snapshot = Snapshot(unit, newest.version, agent_steps, newest.vector.copy())
            evicted = self.pool.add(snapshot)
            if evicted is not None:
                self._snapshot_modules.pop(evicted.name, None)  # a copy still playing it keeps its reference
            if snapshot.name not in self.ratings.players:
                self.ratings.add(snapshot.name, like=unit)

    # ------------------------------------------------------------------ reporting
    def flush(self) -> None:
        if self.run_dir is not None:
            for row in self._rating_rows:
                self.run_dir.append("league.jsonl", row)
        self._rating_rows.clear()

    def summary(self) -> dict[str, Any]:
        """Games per unit and opponent kind, the snapshot pool, and the final ratings (RunResult.league)."""
        return {"games": self.games, "snapshots_taken": self.pool.taken,
                "pool": {u: [s.name for s in p] for u, p in self.pool.pools.items()},
                "ratings": self.ratings.as_dict()}


def plot_league(run_dir: Any, summary: dict[str, Any]) -> str | None:
    """Ratings with 95% intervals (± 2 RD): each snapshot by the version it froze, learners and players apart."""

    ratings = summary.get("ratings", {})
    plt = pyplot()
    if not ratings or plt is None:
        return None
    snapshots = OrderedDict(sorted(((p, r) for p, r in ratings.items() if "@v" in p),
                                   key=lambda pr: (pr[0].split("@v")[0], int(pr[0].split("@v")[1]))))
    others = {p: r for p, r in ratings.items() if "@v" not in p}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    units = sorted({p.split("@v")[0] for p in snapshots})
    for unit in units:
        points = [(int(p.split("@v")[1]), r) for p, r in snapshots.items() if p.startswith(unit + "@v")]
        x = [v for v, _ in points]
        ax.errorbar(x, [r["rating"] for _, r in points], yerr=[2 * r["rd"] for _, r in points], fmt="o-",
                    capsize=3, markersize=4, label=f"{unit} snapshots (by policy version)")
    for i, (player, r) in enumerate(sorted(others.items())):
        ax.axhline(r["rating"], linestyle="--", linewidth=1, color=f"C{(i + len(units)) % 10}",
                   label=f"{player}: {r['rating']:.0f} ± {2 * r['rd']:.0f} ({r['games']} games)")
    ax.set_xlabel("policy version of the snapshot")
    ax.set_ylabel("Glicko rating (± 2 RD)")
    ax.set_title("league ratings from training games")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    out = str(Path(run_dir.path) / "league.png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
