"""The parallel path's loop over one env copy: a simultaneous-move env stepped through its parallel API, a whole cycle
at a time (docs/transitions.md, "The parallel path").

`ParallelStepper` hands out every live agent's decision of a cycle at once (`pending`); once all of them are
answered (`step`), it calls `env.step` with every action. Transitions are assembled by the same
`TransitionAssembler` as on the AEC path, with the same rules, so that for an AEC env made by `parallel_to_aec`
both paths produce the same transitions (a test compares them field by field): an agent's transition is completed
by its next decision, with the reward the step paid it and the observation it then decides on; an agent the step
ends (terminated or truncated) gets its last transition completed at once, with the observation the step returned
for it; a cut completes every transition still open as truncated (rule 5). A cut takes effect between cycles: a
budget or `max_episode_steps` never splits a cycle.

For an env whose `reset` and `step` only queue their request (remote env copies send a round's cycles of many
copies in one frame: runtime/copies/remote.py), each is split in two: `request_reset` / `after_reset` and `act` /
`stepped`, the second given what the env's call returned once its reply is in.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

from pzasync.core.stepper import PendingDecision, episode_summary
from pzasync.core.transitions import EpisodeSummary, LayoutBook, Transition, TransitionAssembler

#: An answered decision: the decision, its action, and the extras stored with its transition.
Answered = tuple[PendingDecision, Any, dict]


class ParallelStepper:
    """One parallel env copy's episodes, stepped a cycle at a time (module docstring).

    `emit(transition)` gets each completed transition and `on_episode(summary)` each finished or cut episode.
    The first `reset` gets `seed`, later ones none (docs/transitions.md, rule 8). `to_env(agent, action)` turns a
    stored action into what `env.step` takes.
    """

    def __init__(
        self,
        env: Any,
        emit: Callable[[Transition], None],
        *,
        copy: int = 0,
        seed: int | None = None,
        layouts: LayoutBook | None = None,
        check_rewards: bool = True,
        max_episode_steps: int | None = None,
        to_env: Callable[[str, Any], Any] | None = None,
        on_episode: Callable[[EpisodeSummary], None] | None = None,
    ) -> None:
        self.env = env
        self.copy = copy
        self.emit = emit
        self.on_episode = on_episode
        self.seed = seed
        self.layouts = layouts or LayoutBook(env)
        self.check_rewards = check_rewards
        self.max_episode_steps = max_episode_steps
        self.to_env = to_env
        self.assembler = TransitionAssembler(self.layouts)
        self.in_episode = False
        #: Decisions taken in this copy (all episodes).
        self.steps = 0
        #: What the env paid each agent this episode, summed from every step's rewards (invariant 8's "paid").
        self.paid: dict[str, float] = defaultdict(float)
        self._first_reset = True
        self._observations: dict[str, Any] = {}
        self._infos: dict[str, Any] = {}
        #: This cycle's decisions, waiting for their answers.
        self._cycle: list[PendingDecision] = []
        #: Agents whose last transition the step left open, with the reward that step paid them: their next
        #: decision completes it (or a cut, as truncated).
        self._open: dict[str, float] = {}
        #: The agents of the step in flight (`act` to `stepped`).
        self._acted: list[str] = []

    @property
    def episode_index(self) -> int:
        return self.assembler.episode_index

    @property
    def agent_selection(self) -> str | None:
        """The first agent of the cycle being decided (for error messages, as an AEC env's `agent_selection`)."""
        return self._cycle[0].agent if self._cycle else None

    # ------------------------------------------------------------------------------------------ an episode
    def reset(self, seed: int | None = None) -> None:
        """Start the next episode; a `seed` given here seeds this reset whatever the first-reset rule."""
        self.after_reset(self.request_reset(seed))

    def request_reset(self, seed: int | None = None) -> Any:
        """`reset` up to the env's reset; returns what it returned, for `after_reset` (an env that only queues the
        request returns None: `after_reset` then gets its (observations, infos) once they are in)."""
        outcome = self.env.reset(seed=seed if seed is not None else self.seed if self._first_reset else None)
        self._first_reset = False
        return outcome

    def after_reset(self, outcome: tuple[dict, dict]) -> None:
        """Complete a `request_reset` with the (observations, infos) the env's reset returned."""
        observations, infos = outcome
        self.assembler.start_episode()
        self.paid.clear()
        self._open.clear()
        self._observations, self._infos = dict(observations), dict(infos or {})
        self.in_episode = True
        self._open_cycle()

    def pending(self) -> list[PendingDecision]:
        """The decisions of the cycle being decided: every live agent's, in `env.agents` order (empty between
        episodes)."""
        return self._cycle

    def _open_cycle(self) -> None:
        """The next cycle's decisions, or the episode's end: no live agent left, or `max_episode_steps` that the
        cycle would pass (then the episode is cut before it)."""
        live = list(self.env.agents)
        if self._open and not self._open.keys() <= set(live):
            alive = set(live)
            for agent in [a for a in self._open if a not in alive]:  # left without being done: truncated there
                self._complete(agent, self._open.pop(agent), truncated=True)
        if not live:
            self._end(cut=False)
            return
        if self.max_episode_steps is not None and self.assembler.agent_steps + len(live) > self.max_episode_steps:
            self.cut()
            return
        decisions = []
        for agent in live:
            info = self._infos.get(agent)
            obs, mask = self.layouts.get(agent, info).split(self._observations[agent], info)
            decisions.append(PendingDecision(self.copy, agent, obs, mask))
        self._cycle = decisions

    def next_decisions(self) -> list[PendingDecision]:
        """`pending` (`CopyStepper`): the cycle's decisions, none once the episode has ended."""
        return list(self._cycle)

    def answer(self, answered: list[Answered]) -> None:
        """`step` (`CopyStepper`)."""
        self.step(answered)

    def step(self, answered: list[Answered]) -> None:
        """Take the cycle's actions (one answer per pending decision, any order): complete each agent's open
        transition with the decision that follows it (rules 1, 2), step the env with every action, and complete
        at once the transitions of the agents the step ended (rule 3)."""
        self.stepped(self.act(answered))

    def act(self, answered: list[Answered]) -> Any:
        """`step` up to the env's step; returns what it returned, for `stepped` (an env that only queues the step
        returns None: `stepped` then gets its five dicts once they are in)."""
        if len(answered) != len(self._cycle):
            raise RuntimeError(f"env copy {self.copy}: {len(answered)} answers for a cycle of "
                               f"{len(self._cycle)} decisions")
        assembler, actions = self.assembler, {}
        for decision, action, extras in answered:
            agent = decision.agent
            if agent in self._open:
                done = assembler.completed(agent, self._open.pop(agent), decision.obs, decision.mask)
                if done is not None:
                    self.emit(done)
            assembler.decide(agent, decision.obs, decision.mask, action, extras)
            actions[agent] = action if self.to_env is None else self.to_env(agent, action)
        self.steps += len(actions)
        self._cycle = []
        self._acted = list(actions)
        return self.env.step(actions)

    def stepped(self, outcome: tuple[dict, dict, dict, dict, dict]) -> None:
        """Complete an `act` with the (observations, rewards, terminations, truncations, infos) the env's step
        returned."""
        observations, rewards, terminations, truncations, infos = outcome
        assembler, acted, self._acted = self.assembler, self._acted, []
        for agent, reward in rewards.items():
            self.paid[agent] += float(reward)
        self._observations.update(observations)
        self._infos.update(infos or {})
        acting = set(acted)
        for agent, reward in rewards.items():
            if agent not in acting:  # paid before its first decision (rule 4)
                assembler.completed(agent, float(reward), None, None)
        for agent in acted:
            reward = float(rewards.get(agent, 0.0))
            terminated, truncated = bool(terminations.get(agent, False)), bool(truncations.get(agent, False))
            if terminated or truncated:
                self._complete(agent, reward, terminated, truncated)
            else:
                self._open[agent] = reward
        self._open_cycle()

    def _complete(self, agent: str, reward: float, terminated: bool = False, truncated: bool = False) -> None:
        """Complete the agent's open transition with its current observation (the step's, or its last)."""
        info = self._infos.get(agent)
        obs, mask = self.layouts.get(agent, info).split(self._observations[agent], info)
        done = self.assembler.completed(agent, reward, obs, mask, terminated, truncated)
        if done is not None:
            self.emit(done)

    def cut(self) -> None:
        """End the episode here (a budget, a stop request, `max_episode_steps`): every open transition is
        completed as truncated, with the observation the agent would decide on next and the reward the last
        step paid it (docs/transitions.md, rule 5). Does nothing between episodes."""
        if not self.in_episode:
            return
        self._cycle = []
        for agent in list(self._open):
            self._complete(agent, self._open.pop(agent), truncated=True)
        self._end(cut=True)

    def abandon(self) -> int:
        """Forget the episode in flight without completing anything (its env can no longer be observed);
        returns how many open transitions were dropped; does nothing between episodes."""
        if not self.in_episode:
            return 0
        self._cycle, self._open, self._acted = [], {}, []
        self.in_episode = False
        return len(self.assembler.abandon_episode())

    def _end(self, cut: bool) -> None:
        self.in_episode = False
        self._cycle = []
        summary = episode_summary(self.assembler, self.paid if self.check_rewards else None, cut, self.copy, self.env)
        if self.on_episode is not None:
            self.on_episode(summary)
