"""Which models run: the one owner of placement, a plain state machine over the models' engines and their demand.

Each model has its own supervisor (start, ready, restart with backoff, drain, stop); this machine only decides when
one is started or stopped (or restarted where it stands), from the messages below, and acts through its effects (a
recording fake in the unit tests). It reads each model's pending requests (in flight or queued at its gate) through
the effects, inside its own loop, at the moment it decides.

    a request waits for a stopped model  -> Demand    -> start it if no running model shares a GPU with it;
                                                         else stop those that share one, once each is evictable
    a model's engine changes state       -> StateChanged (its supervisor's) -> ready: its waiters are served;
                                                         stopped/failed: GPUs free
    a model's pending requests hit 0/not -> Pending   -> re-place (a waiter may now evict it); arm its idle ttl
    timers                               -> TtlElapsed (unload an idle model), FairnessElapsed (re-place)
    admin                                -> Load, Unload, Restart; at daemon start: Preload

Evictable, for a model B that shares a GPU with a waiting model A: B is idle (no pending request, and its last
one ended at least `idle_s` ago, since a client's next request usually follows at once), or B has been ready for
`fairness_s` (its turn; then B drains, bounded by supervisor.drain_timeout_s, and stops). A model that is loading
keeps its GPUs until it is ready. So a model with requests is not evicted before its queue drains or its turn
passes, and busy models take turns of at least fairness_s instead of thrashing. The oldest waiter goes
first (an admin's load before all), and a younger one never takes GPUs an older one is waiting for.

A model with `sleep` is swapped out by vLLM's sleep mode instead of a stop (its supervisor stops it where the
engine has none): asleep, it holds no GPU for placement and a request wakes it. Its ttl and an unload stop it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from caovan_manager.inbox import Outcome
from caovan_manager.supervisor.messages import RestartCommand
from caovan_manager.supervisor.state import State, StateChanged

from .catalog import Catalog, ModelEntry

# States in which a model holds (or is about to hold) its GPUs.
# An asleep model keeps its process but gives its GPU memory back: it occupies nothing.
OCCUPYING = (State.STARTING, State.CHECKING, State.READY, State.DRAINING, State.STOPPING, State.BACKOFF,
             State.FALLING_ASLEEP, State.WAKING)
LOADING = (State.STARTING, State.CHECKING, State.BACKOFF, State.WAKING)


@dataclass(frozen=True)
class Demand:
    model: str


@dataclass(frozen=True)
class Pending:
    model: str
    count: int


@dataclass(frozen=True)
class TtlElapsed:
    model: str


@dataclass(frozen=True)
class FairnessElapsed:
    model: str


@dataclass(frozen=True)
class Load:
    model: str
    reason: str = "load requested"


@dataclass(frozen=True)
class Restart:
    """An admin's restart: a loaded model restarts on its GPUs (its supervisor drains it); one that is not loaded is
    loaded, which may stop the models that share its GPUs."""

    model: str
    reason: str = "restart requested"


@dataclass(frozen=True)
class Preload:
    """At daemon start: start the entries marked preload, in order."""


@dataclass(frozen=True)
class Unload:
    model: str
    reason: str = "unload requested"


PlacementMessage = (Demand | StateChanged | Pending | TtlElapsed | FairnessElapsed | Load | Unload | Restart
                    | Preload)


class PlacementEffects(Protocol):
    def start(self, model: str, reason: str) -> None:
        """Tell the model's supervisor to start its engine; its states come back as StateChanged."""

    def stop(self, model: str, reason: str) -> None:
        """Tell the model's supervisor to drain and stop its engine."""

    def sleep(self, model: str, reason: str) -> None:
        """Tell the model's supervisor to drain its engine and put it to sleep (or stop it, lacking sleep mode)."""

    def pending(self, model: str) -> int:
        """Requests of this model in flight or queued at its gate, now."""

    def set_timer(self, name: str, delay_s: float, message: PlacementMessage) -> None: ...

    def cancel_timer(self, name: str) -> None: ...

    def swapped_in(self, model: str, evicted: list[str], waited_s: float) -> None:
        """A model that had to stop others for its GPUs is ready, `waited_s` after its first waiting request."""

    def used(self, model: str) -> None:
        """The model's requests started or ended (its last-used time)."""


@dataclass
class Slot:
    """Placement's view of one model: its engine's latest published change, and the demand on it."""

    entry: ModelEntry
    engine: StateChanged | None = None  # None until its supervisor publishes: stopped
    wanted: bool = False  # a start was sent and no stop since
    waiting_since: float | None = None  # the first request waiting for it to load, since it last was ready
    load_requested: bool = False  # an admin asked for it: it goes first and does not wait for the fairness bound
    last_used: float = 0.0  # the latest request's start or end, or the latest ready: the idle ttl runs from here
    last_request: float | None = None  # the latest request's start or end
    ready_since: float | None = None  # the start of its turn on its GPUs
    swaps_in: int = 0
    evicted_for_it: tuple[str, ...] = ()  # the models stopped to make room for its current start
    swap_from: float | None = None  # when the first of those was stopped: the swap's duration runs from here

    @property
    def state(self) -> State:
        return self.engine.state if self.engine else State.STOPPED

    @property
    def stuck(self) -> bool:
        """Failed with processes left behind: it keeps its GPUs until it is started again."""
        return self.engine is not None and self.engine.state is State.FAILED and self.engine.holds_gpus

    @property
    def occupying(self) -> bool:
        return self.wanted or self.stuck or self.state in OCCUPYING


class Placement:
    def __init__(self, catalog: Catalog, effects: PlacementEffects, fairness_s: float, idle_s: float,
                 clock: Callable[[], float]) -> None:
        self.catalog = catalog
        self.fx = effects
        self.fairness_s = fairness_s
        self.idle_s = idle_s
        self.clock = clock
        self.slots = {entry.name: Slot(entry) for entry in catalog}

    def handle(self, message: PlacementMessage) -> Outcome | None:
        outcome = getattr(self, "_on_" + type(message).__name__)(message)
        self._place()
        return outcome

    # Messages ---------------------------------------------------------------------------------------------------------

    def _on_Preload(self, msg: Preload) -> Outcome:
        """One that shares a GPU with an earlier preloaded entry is skipped: its first request loads it."""
        started, skipped = [], []
        for slot in self.slots.values():
            if slot.entry.preload:
                if self._blockers(slot):
                    skipped.append(slot.entry.name)
                else:
                    self._start(slot, "preloaded at daemon start")
                    started.append(slot.entry.name)
        note = (f"; not preloaded, sharing GPUs with an earlier preloaded model (their first request loads them): "
                f"{', '.join(skipped)}") if skipped else ""
        return Outcome(not skipped, f"preloading {', '.join(started) or 'nothing'}{note}")

    def _on_Demand(self, msg: Demand) -> None:
        slot = self.slots[msg.model]
        if slot.waiting_since is None and slot.state is not State.READY:
            slot.waiting_since = self.clock()

    def _on_StateChanged(self, msg: StateChanged) -> None:
        slot = self.slots[msg.model]
        slot.engine = msg
        if msg.state is not State.READY:
            slot.ready_since = None  # its turn ended; a restart's load is protected as a load
        if msg.state is State.READY:
            if slot.evicted_for_it:
                slot.swaps_in += 1
                self.fx.swapped_in(slot.entry.name, list(slot.evicted_for_it), self.clock() - slot.swap_from)
            slot.evicted_for_it, slot.swap_from = (), None
            slot.waiting_since = None
            slot.wanted = True
            slot.last_used = slot.ready_since = self.clock()
            self._arm_ttl(slot)
        elif msg.state in (State.STOPPED, State.FAILED, State.ASLEEP):
            # Stopped or put to sleep by us, by an admin, or given up on: its GPUs are free (unless processes were
            # left behind). A failed model's waiters got a 503.
            slot.wanted = False
            slot.evicted_for_it, slot.swap_from = (), None
            if msg.state is State.FAILED:
                slot.waiting_since = None
            self.fx.cancel_timer(f"ttl:{slot.entry.name}")
            if msg.state is State.ASLEEP:
                self._arm_ttl(slot)  # asleep it still holds host memory and a process: the ttl ends those

    def _on_Pending(self, msg: Pending) -> None:
        slot = self.slots[msg.model]
        slot.last_used = slot.last_request = self.clock()
        self.fx.used(msg.model)
        if msg.count == 0:
            if slot.state is not State.READY and not slot.occupying:
                # Its waiters gave up or were refused: nobody needs it loaded now, nor the room made for it.
                slot.waiting_since, slot.evicted_for_it, slot.swap_from = None, (), None
            self._arm_ttl(slot)

    def _on_TtlElapsed(self, msg: TtlElapsed) -> None:
        slot = self.slots[msg.model]
        ttl = slot.entry.ttl_s
        asleep = slot.state is State.ASLEEP and not slot.wanted
        if not ttl or not (asleep or (slot.state is State.READY and slot.wanted)) or self.fx.pending(msg.model):
            return
        idle = self.clock() - slot.last_used
        if idle >= ttl:
            self._stop(slot, f"unloaded after {idle:.0f} s without requests (ttl_s = {ttl:g})")
        else:
            self.fx.set_timer(f"ttl:{msg.model}", ttl - idle, TtlElapsed(msg.model))

    def _on_FairnessElapsed(self, msg: FairnessElapsed) -> None:
        pass  # _place runs after every message and finds the bound passed

    def _on_Load(self, msg: Load) -> Outcome:
        slot = self.slots[msg.model]
        if slot.wanted and slot.state is State.READY:
            return Outcome(True, f"{msg.model} is already loaded")
        if slot.state in LOADING or (slot.wanted and slot.state in (State.STOPPED, State.ASLEEP)):
            return Outcome(True, f"{msg.model} is loading ({slot.state.value})")
        if slot.occupying and not slot.stuck:  # being stopped (swapped out, unloaded): loaded again once stopped
            slot.load_requested = True
            return Outcome(True, f"{msg.model} is being stopped ({slot.state.value}); it loads again once stopped")
        blockers = self._blockers(slot)
        if not blockers:
            self._start(slot, msg.reason)
            return Outcome(True, f"loading {msg.model}")
        # An explicit load does not wait for the fairness bound: the models in its way drain and stop now.
        slot.load_requested = True
        self._evict(slot, blockers, f"unloaded to load {msg.model} ({msg.reason})")
        return Outcome(True, f"loading {msg.model} once {', '.join(b.entry.name for b in blockers)} "
                             f"(sharing its GPUs) drained and stopped")

    def _on_Restart(self, msg: Restart) -> Outcome:
        slot = self.slots[msg.model]
        if slot.wanted and not slot.stuck and slot.state not in (State.STOPPED, State.FAILED):
            # Loaded (or loading): it keeps its GPUs; its supervisor drains and restarts it, or says why not.
            return Outcome(True, f"restarting {msg.model}", then=RestartCommand(msg.reason))
        return self._on_Load(Load(msg.model, msg.reason))

    def _on_Unload(self, msg: Unload) -> Outcome:
        slot = self.slots[msg.model]
        slot.waiting_since, slot.load_requested = None, False
        if slot.state is State.ASLEEP and not slot.wanted:
            self._stop(slot, msg.reason)
            return Outcome(True, f"stopping {msg.model}, which was asleep")
        if not slot.occupying:
            return Outcome(True, f"{msg.model} is not loaded")
        if slot.state in (State.DRAINING, State.STOPPING) and not slot.wanted and not slot.entry.sleep:
            # (One with sleep may be draining to fall asleep: the stop below makes it stop instead.)
            return Outcome(True, f"{msg.model} is already being stopped ({slot.state.value})")
        self._stop(slot, msg.reason)
        return Outcome(True, f"draining {msg.model}, then stopping it; requests for it load it again (those "
                             f"queued now, at once)")

    # The decision -----------------------------------------------------------------------------------------------------

    def _place(self) -> None:
        """Serve the waiting models, oldest first."""
        now = self.clock()
        claimed: list[Slot] = []  # waiting models that could not start yet; younger ones may not take their GPUs
        waiters = sorted((s for s in self.slots.values()
                          if (s.load_requested or s.waiting_since is not None) and not s.occupying),
                         key=lambda s: (not s.load_requested, s.waiting_since or now))
        for slot in waiters:
            if any(slot.entry.overlaps(older.entry) for older in claimed):
                continue
            blockers = self._blockers(slot)
            if not blockers:
                self._start(slot, "loaded on request" if slot.load_requested else "a request is waiting for it")
                continue
            claimed.append(slot)
            leaving = [b for b in blockers if b.wanted]  # the others are draining or stopping already
            protected = [] if slot.load_requested else [b for b in leaving if self._protected_for(b, now)]
            if protected:
                # Re-placed when a protection ends (a timer), a load finishes (StateChanged) or requests come and go
                # (Pending); every holder in the way must be free, so the timer waits for the last.
                ends = [self._protected_for(b, now) for b in protected]
                if all(end < float("inf") for end in ends):
                    self.fx.set_timer(f"fairness:{slot.entry.name}", max(ends), FairnessElapsed(slot.entry.name))
            elif leaving:
                self._evict(slot, leaving, f"swapped out for {slot.entry.name}, which has requests waiting")

    def _protected_for(self, holder: Slot, now: float) -> float:
        """How much longer a holder keeps its GPUs (0: not protected; inf: until it reports). A model keeps them
        while it loads, and once ready, while it is busy (requests pending, or its last one ended less than idle_s
        ago), for at most its turn of fairness_s."""
        if holder.ready_since is None:
            # Loading (or its start sent and not yet begun), or retrying a failed load: protected until it reports.
            loading = holder.state in LOADING or (
                holder.wanted and holder.state in (State.STOPPED, State.FAILED, State.ASLEEP))
            return float("inf") if loading else 0.0
        turn_left = self.fairness_s - (now - holder.ready_since)
        if turn_left <= 0:
            return 0.0
        if self.fx.pending(holder.entry.name):
            return turn_left
        if holder.last_request is None:
            return 0.0
        return max(0.0, min(turn_left, holder.last_request + self.idle_s - now))

    def _blockers(self, slot: Slot) -> list[Slot]:
        return [other for other in self.slots.values()
                if other is not slot and other.occupying and other.entry.overlaps(slot.entry)]

    def _evict(self, slot: Slot, blockers: list[Slot], reason: str) -> None:
        for blocker in blockers:
            if blocker.wanted:
                self._stop(blocker, reason, swap=True)
        slot.evicted_for_it = tuple(dict.fromkeys((*slot.evicted_for_it, *(b.entry.name for b in blockers))))
        if slot.swap_from is None:
            slot.swap_from = self.clock()
        self.fx.cancel_timer(f"fairness:{slot.entry.name}")

    def _start(self, slot: Slot, reason: str) -> None:
        slot.wanted, slot.load_requested = True, False
        self.fx.cancel_timer(f"fairness:{slot.entry.name}")
        self.fx.start(slot.entry.name, reason)

    def _stop(self, slot: Slot, reason: str, swap: bool = False) -> None:
        """Stop the model's engine; a swap puts one configured with `sleep` to sleep instead."""
        slot.wanted = False
        self.fx.cancel_timer(f"ttl:{slot.entry.name}")
        if swap and slot.entry.sleep:
            self.fx.sleep(slot.entry.name, reason)
        else:
            self.fx.stop(slot.entry.name, reason)

    def _arm_ttl(self, slot: Slot) -> None:
        if (slot.entry.ttl_s and slot.state in (State.READY, State.ASLEEP)
                and not self.fx.pending(slot.entry.name)):
            self.fx.set_timer(f"ttl:{slot.entry.name}", slot.entry.ttl_s, TtlElapsed(slot.entry.name))
