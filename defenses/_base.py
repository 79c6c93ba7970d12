"""The defender protocol, the per-case context it works through, and the registry.

A defender is an async callable ``(view, ctx) -> Answer`` built by a factory registered with
``@defender(name, options=...)``. ``view`` is a :class:`~medmis.defenses.CaseView`:
the question, options and context sentences in delivery order, and nothing a deployed system
would not know (no gold key, target, sentence labels, protocol or item id). Its typed options are validated, recorded on every record
and enough to rebuild the exact defender. Third-party defenders register through the
entry-point group ``medmis.defenders`` (the entry point names a module or object whose import
runs the decorator).

Everything a defender does with a model or a tool goes through :class:`DefenderContext`,
which traces the exact messages sent, the raw output, usage, timing and cache hits, applies
the run's retry policy to model calls, and turns tool failures into :class:`ToolError` that
the defender can show to its model.

The built-in defenders live one module each in ``medmis.graphs``, above this registry; the
registry imports that package once, on the first lookup (:func:`_load_builtins`), so importing
the contract never imports the implementations and the implementations import the contract
plainly.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal, NamedTuple

from pydantic import ValidationError

from medmis.tools import ConfigError, noting_signals, signals_seen

from ._case import ANSWER_FORMATS, Answer, AnswerFormat, CaseView, Viewable, as_view
from ._context import DefenderContext, DefenderOptions, SolveFn

ENTRY_POINT_GROUP = "medmis.defenders"
BUILTINS_PACKAGE = "medmis.graphs"
"""The package whose import registers the built-in defenders (one module per defender)."""


class DefenderConfigError(ConfigError, ValueError):
    """An unknown defender name or invalid defender options (a user error, not a bug)."""


Factory = Callable[[Any], SolveFn]
Prompts = Callable[[Any], Mapping[str, str]]
"""``prompts(options) -> {part: text}``: the instruction texts a configured defender shows its
model (what an adaptive attacker gets to read; ``medmis generate --attack adaptive``)."""


class ProtocolCost(NamedTuple):
    """Expected work per case under one protocol, for cost estimates before any record exists.

    Attributes:
        calls: Model calls per case.
        tool_calls: Tool calls (searches, page visits) per case.
        token_growth: Input tokens as a multiple of the bare prompt's (multi-turn agents resend
            their growing history; a preface adds its own text).
    """

    calls: float
    tool_calls: float
    token_growth: float


@dataclass(frozen=True)
class CostHint:
    """A defender's expected work per case, by protocol (read by ``medmis ablate --dry-run``;
    earlier records of the same cell replace it).

    ``CostHint.of({"clean": (1, 0, 1), "type1": (3, 2, 4), "type2": (8, 8, 12)})`` builds one
    from ``(calls, tool_calls, token_growth)`` triples.
    """

    clean: ProtocolCost
    type1: ProtocolCost
    type2: ProtocolCost

    @classmethod
    def of(cls, table: Mapping[str, tuple[float, float, float]]) -> CostHint:
        """From ``{protocol: (calls, tool_calls, token_growth)}`` for all three protocols."""
        missing = {"clean", "type1", "type2"} - set(table)
        if missing:
            raise ValueError(f"a cost hint needs every protocol; missing {sorted(missing)}")
        return cls(*(ProtocolCost(*table[p]) for p in ("clean", "type1", "type2")))

    def per_case(self, protocol: Literal["clean", "type1", "type2"] | str) -> ProtocolCost:
        """The expected work of one case under ``protocol``."""
        return {"clean": self.clean, "type1": self.type1, "type2": self.type2}[protocol]


DEFAULT_COST = CostHint.of({p: (3.0, 1.0, 4.0) for p in ("clean", "type1", "type2")})
"""What a defender that declares no cost hint is assumed to cost (a small agent)."""


@dataclass(frozen=True)
class DefenderSpec:
    """A registered defender: its factory, options class and what it declares about itself.

    Attributes:
        source: Where the method comes from (``"Author et al. YEAR, arXiv ..."``), or None
            for the toolkit's own; shown by ``medmis defenders``.
        cost: Expected work per case, for cost estimates before any record exists.
        answer_formats: The answer formats it can work in: ``mcq`` (options shown, one
            chosen) and/or ``open`` (no options, a free-text answer). A defender that votes on,
            compares or checks option choices is ``("mcq",)``; an open-ended run skips it.
    """

    name: str
    factory: Factory
    options: type[DefenderOptions]
    description: str
    uses_tools: bool = False
    control: bool = False  # a reference point (e.g. context_blind), never a candidate mitigation
    single_call: bool = False  # exactly one model call per case (batch APIs can serve it)
    prompts: Prompts | None = None  # the instruction texts it shows its model (see ``Prompts``)
    source: str | None = None
    cost: CostHint = DEFAULT_COST
    requires: Callable[[], str | None] | None = None  # why it cannot run here (an extra), or None
    answer_formats: tuple[AnswerFormat, ...] = ("mcq",)
    deterministic: bool = False  # its requests follow from the case, its options and earlier replies

    def works_with(self, answer_format: str) -> bool:
        """Whether it can answer cases asked in ``answer_format`` (``mcq`` or ``open``)."""
        return answer_format in self.answer_formats


@dataclass(frozen=True)
class Defender:
    """A configured defender: registry name, validated options and a display label."""

    name: str
    options: DefenderOptions
    solve: SolveFn
    label: str
    uses_tools: bool = False
    single_call: bool = False
    deterministic: bool = False

    async def __call__(self, case: CaseView | Viewable, ctx: DefenderContext) -> Answer:
        """Answer one case. A full ``Case`` is accepted from the caller's side and
        reduced to its view here: the solve function only ever receives the view."""
        answer = await self.solve(as_view(case), ctx)
        return answer.model_copy(
            update={
                "usage": ctx.usage,
                "llm_calls": ctx.llm_calls,
                "tool_calls": ctx.tool_calls,
                "trace": ctx.trace,
            }
        )


_REGISTRY: dict[str, DefenderSpec] = {}
_entry_points_loaded = False


def defender(
    name: str,
    *,
    options: type[DefenderOptions] = DefenderOptions,
    description: str | None = None,
    uses_tools: bool = False,
    control: bool = False,
    single_call: bool = False,
    prompts: Prompts | None = None,
    source: str | None = None,
    cost: CostHint | Mapping[str, tuple[float, float, float]] | None = None,
    requires: Callable[[], str | None] | None = None,
    answer_formats: tuple[AnswerFormat, ...] = ("mcq",),
    deterministic: bool = False,
) -> Callable[[Factory], Factory]:
    """Register a defender factory ``factory(options) -> solve``.

    ``single_call=True`` declares that every case makes exactly one model call and no tool
    call, whatever the options. ``deterministic=True`` declares that every request it sends
    follows from the case, its options, earlier replies and tool results alone (nothing
    random, no clock, no order of completion): ``medmis run --batch`` accepts such defenders
    and answers their calls round by round (and single-call ones in one round).
    ``prompts=fn`` declares the instruction texts it shows its model, ``fn(options) ->
    {part: text}`` (read by :func:`defender_prompts`; an adaptive attacker writes against them).
    ``source`` cites the method (``"Author et al. YEAR, arXiv ..."``); ``cost`` is its expected
    work per case (a :class:`CostHint` or ``{protocol: (calls, tool_calls, token_growth)}``),
    :data:`DEFAULT_COST` when absent.
    ``requires=fn`` declares an optional dependency: ``fn()`` says in one line why the defender
    cannot run on this installation (None when it can); see :func:`defender_unavailable`.
    ``answer_formats`` declares whether it works on open-ended cases (no options, a free-text
    answer): ``("mcq",)`` by default, so a defender written for options is never handed a case
    without them; ``("mcq", "open")`` when its work does not depend on the options (it renders
    the case with :func:`render_prompt` and reads the answer with ``answer_from_reply``).

    Example::

        class MyOptions(DefenderOptions):
            strictness: int = 2

        @defender("my_defense", options=MyOptions)
        def my_defense(opts: MyOptions) -> SolveFn:
            async def solve(case: CaseView, ctx: DefenderContext) -> Answer: ...
            return solve
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ValueError(f"defender names are lower_snake_case, got {name!r}")
    hint = DEFAULT_COST if cost is None else cost if isinstance(cost, CostHint) else CostHint.of(cost)
    formats = tuple(answer_formats)
    if not formats or any(f not in ANSWER_FORMATS for f in formats):
        raise ValueError(f"answer_formats must be a non-empty subset of {ANSWER_FORMATS}, got {formats!r}")

    def register(factory: Factory) -> Factory:
        text = description or ((factory.__doc__ or "").strip().splitlines() or [""])[0]
        existing = _REGISTRY.get(name)
        # re-importing the same module (e.g. a reload in a notebook) re-registers the same
        # factory; a different factory under a taken name is a real conflict
        if existing is not None and existing.factory.__qualname__ != factory.__qualname__:
            raise DefenderConfigError(f"defender {name!r} is already registered")
        _REGISTRY[name] = DefenderSpec(
            name, factory, options, text, uses_tools, control, single_call, prompts, source, hint,
            requires, formats, deterministic,
        )
        return factory

    return register


_BROKEN: dict[str, str] = {}  # entry-point name -> why its import failed
# whether a broken entry point is announced on stderr: off in helper processes whose parent
# (the `medmis` command) announces it already, so the user sees one line
warn_broken_plugins = True


def quiet_broken_plugins() -> None:
    """Stop announcing broken entry points on stderr (for a helper process whose parent, the
    ``medmis`` command, announces them already)."""
    global warn_broken_plugins
    warn_broken_plugins = False


def _load_builtins() -> None:
    # The one dynamic import of the layering: the built-ins sit above this registry (they
    # import the contract), so the registry reaches them by name, once, on first lookup.
    importlib.import_module(BUILTINS_PACKAGE)


def _load_entry_points() -> None:
    global _entry_points_loaded
    _load_builtins()
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        signals = signals_seen()
        try:
            with noting_signals():
                ep.load()
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # one broken plug-in must not take the others down
            if isinstance(exc, KeyboardInterrupt) and signals_seen() > signals:
                raise  # a real Ctrl-C (or SIGTERM) during the import stops the command
            lines = str(exc).strip().splitlines()
            why = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
            _BROKEN[ep.name] = (f"plug-in entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}) "
                                f"failed to import: {why}")
            if warn_broken_plugins:
                print(f"medmis: warning: {_BROKEN[ep.name]}; skipped", file=sys.stderr)


def load_installed() -> None:
    """Register the built-ins and every installed plug-in (entry points), once per process."""
    _load_entry_points()


def registered() -> dict[str, DefenderSpec]:
    """A copy of the registry as it is now (name -> spec), for :func:`restore_registry`."""
    return dict(_REGISTRY)


def restore_registry(snapshot: Mapping[str, DefenderSpec]) -> None:
    """Put the registry back to ``snapshot`` (undoes a plug-in file that failed half-way)."""
    _REGISTRY.clear()
    _REGISTRY.update(snapshot)


def get_spec(name: str) -> DefenderSpec:
    """The registration of defender ``name`` (built-ins and entry points load on first use).

    Raises:
        DefenderConfigError: No defender of that name (or its plug-in failed to import).
    """
    if name not in _REGISTRY:
        _load_builtins()
    if name not in _REGISTRY:
        _load_entry_points()
    try:
        return _REGISTRY[name]
    except KeyError:
        if name in _BROKEN:
            raise DefenderConfigError(f"defender {name!r}: {_BROKEN[name]}") from None
        known = ", ".join(sorted(_REGISTRY))
        raise DefenderConfigError(f"unknown defender {name!r} (registered: {known})") from None


def defender_unavailable(name: str) -> str | None:
    """Why registered defender ``name`` cannot run on this installation (its declared optional
    dependency is missing), in one line; None when it can run or is not registered here."""
    spec = _REGISTRY.get(name)
    if spec is None or spec.requires is None:
        return None
    return spec.requires()


def mcq_only(names: Sequence[str], answer_format: str) -> list[str]:
    """The defenders of ``names`` (registry names or labels) that cannot work in
    ``answer_format``, in order (empty for ``mcq`` runs; unknown names are left to the lookup
    that reports them)."""
    out = []
    for label in names:
        try:
            spec = get_spec(label.split("[", 1)[0])
        except DefenderConfigError:
            continue
        if not spec.works_with(answer_format):
            out.append(label)
    return out


def is_control(label: str) -> bool:
    """Whether a defender label (``name`` or ``name[k=v]``) names a registered control."""
    try:
        return get_spec(label.split("[", 1)[0]).control
    except DefenderConfigError:
        return False  # a plug-in not installed here: treat it as a candidate


def list_defenders() -> list[DefenderSpec]:
    _load_entry_points()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def defender_prompts(name: str, options: Mapping[str, Any] | DefenderOptions | None = None) -> dict[str, str]:
    """The instruction texts defender ``name`` (with ``options``) shows its model, by part
    (e.g. ``{"warning": ...}``), as its registration declares them; ``{}`` when it declares
    none (``none``, ``context_blind``, a plug-in that did not say).

    Raises:
        DefenderConfigError: Unknown defender or invalid options.
    """
    spec = get_spec(name)
    if spec.prompts is None:
        return {}
    opts = _options(spec, options)
    return {str(k): str(v) for k, v in spec.prompts(opts).items() if str(v).strip()}


def _options(spec: DefenderSpec, options: Mapping[str, Any] | DefenderOptions | None) -> DefenderOptions:
    if isinstance(options, DefenderOptions):
        return options
    try:
        return spec.options(**dict(options or {}))
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise DefenderConfigError(f"invalid options for defender {spec.name!r}: {errors}") from exc


def _label(name: str, opts: DefenderOptions) -> str:
    changed = opts.label_items()
    if not changed:
        return name
    inner = ",".join(f"{k}={v}" for k, v in sorted(changed.items()))
    return f"{name}[{inner}]"


def create_defender(
    name: str, options: Mapping[str, Any] | DefenderOptions | None = None, *, label: str | None = None
) -> Defender:
    """Build a defender by name with validated options."""
    spec = get_spec(name)
    opts = _options(spec, options)
    solve = spec.factory(opts)
    return Defender(name, opts, solve, label or _label(name, opts), spec.uses_tools, spec.single_call,
                    spec.deterministic)
