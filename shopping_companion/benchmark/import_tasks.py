"""``shopcomp import-tasks``: a benchmark directory from tasks a researcher wrote (``docs/tasks.md``).

Input: a JSON-lines file, one :class:`~shopping_companion.benchmark.task_schema.TaskInput` a line.
Each line is checked on its own and every problem is reported with its line number and field
path (:class:`Issue`):

* ``json`` / ``schema``: the line is not a JSON object, or does not fit the schema (field path and
  allowed values, in the style of :func:`shopping_companion.config.validation_message`);
* ``unknown_product``: a reference id is not in the catalog; ``slots``: the number of product
  slots does not fit the task type, ``product_types`` does not name one type per slot, or a
  preference / does-not-matter entry names a slot that does not exist (``slot_out_of_range``);
* ``unknown_attribute``: a preference's attribute is not a key of the value matcher's lexicon
  (:meth:`~shopping_companion.judges.matching.ValueMatcher.key`) *and* the reference product has
  no field or text that could state it (:meth:`~shopping_companion.judges.matching.ProductReader.fields`
  / ``.check``);
* ``unsatisfied_preference`` / ``avoided_present``: the reference product does not have a wanted
  value, or has an avoided one, by :meth:`ProductReader.check` (the rule judge's own reading);
* add-on deals: ``voucher_shop`` (the voucher's shop does not sell a reference product),
  ``voucher_min_spend`` (the reference bundle does not reach it), ``budget_infeasible`` (the
  reference bundle's discounted total, by :func:`~.synthesis.verify.count_bundles`, exceeds the
  budget), ``no_price``, ``currency``;
* ``not_resolvable``: no user turn of a needle session states a wanted preference as the value
  matcher reads it (:func:`~.synthesis.verify.unstated_features`) and the preference gives no
  ``evidence`` (the message suggests it); with evidence this is a warning;
* ``evidence``: a preference's ``evidence`` quote is in no user turn of a needle (whitespace and
  case aside), or its ``{session_id, turn_index}`` names no needle's user turn
  (:func:`locate_evidence`); ``evidence_contradicted``: another needle contradicts a preference
  that has evidence (the conflict detector; haystack sessions that do are swapped, as for every
  task). A dated revision is no conflict: a needle's statement dated before a needle that states
  the wanted value (its evidence, or a user turn) is dropped (:func:`~.synthesis.conflicts.drop_superseded`);
* ``gold_rejected``: the rule judge does not accept the reference products
  (:func:`~.synthesis.verify.gold_accepted`); ``overlapping_product_types``: one product could fill
  two slots of an add-on deal; ``conflicting_haystack``: haystack conflicts remained after
  swapping; ``duplicate_task_id``; ``open_task``: a task without reference products that is not
  allowed (``--allow-open`` off, an add-on deal, no ``product_types``), or that no catalog product
  satisfies (an open single task is judged on its product type and preferences only, so at least
  one catalog product must be of that type and satisfy every wanted preference).

Warnings (recorded, the task is still imported): ``not_searchable`` (a reference product is not in
the BM25 top-k for its slot's query; recorded as ``Verification.searchable=False``),
``instruction_leaks_preference`` (the instruction states a wanted value), ``needle_conflict``
(the conflict detector reads a needle as contradicting a wanted value).

Valid tasks then get what synthesis gives its own (§4 steps 4–5, through
:class:`~.synthesis.build.Synthesizer`'s own methods): a haystack of real sessions (the built-in conversation
pool, or ``--sessions``), drawn by :class:`~.synthesis.haystack.HaystackPool`, denoised by the
:class:`~.synthesis.conflicts.ConflictDetector` (conflicting sessions swapped, each swap recorded as a
:class:`~shopping_companion.types.Change`), the needles put at seeded random positions (or by their dates) and
increasing dates (:func:`~.synthesis.haystack.assign_dates`); and a
:class:`~shopping_companion.types.Verification` (resolvable, searchable, conflict-free, gold accepted,
alternatives counted by :class:`~.synthesis.verify.CatalogMatcher` / :func:`~.synthesis.verify.count_bundles`).

Output: :func:`~.synthesis.build.write_benchmark` (``tasks.jsonl``, ``sessions.jsonl``, stats,
``manifest.json`` with SHA-256 hashes, ``generator: {kind: import, file, sha256}``) plus
``import_report.json``. A file with any error writes nothing unless ``skip_invalid``.
Deterministic: the same file, inputs and seed give the same ``tasks.jsonl`` and ``sessions.jsonl``.
"""

from __future__ import annotations

import bisect
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.benchmark.import_files import Issue, load_session_file, read_task_file
from shopping_companion.benchmark.synthesis.build import CheckFailed, Synthesizer, verified_task
from shopping_companion.benchmark.synthesis.directory import (
    FORMAT_VERSION,
    SynthOutput,
    stats_summary,
    task_counts,
    write_benchmark,
)
from shopping_companion.benchmark.synthesis.catalog_view import (
    Feature,
    label_for,
    domain_of,
    item_synonyms,
    product_type,
)
from shopping_companion.benchmark.synthesis.common import opaque_id, task_rng
from shopping_companion.benchmark.synthesis.conflicts import drop_superseded
from shopping_companion.benchmark.synthesis.config import SynthConfig
from shopping_companion.benchmark.synthesis.generators import SlotSpec, TaskSpec, TemplateGenerator
from shopping_companion.benchmark.synthesis.haystack import PoolSession, assign_dates
from shopping_companion.benchmark.synthesis.verify import (
    CatalogMatcher,
    count_bundles,
    gold_accepted,
    leaked_values,
    states_value,
    unstated_features,
)
from shopping_companion.benchmark.task_schema import EvidenceRef, TaskInput
from shopping_companion.errors import DataError
from shopping_companion.judges.matching import default_matcher, default_reader
from shopping_companion.runs import file_sha256
from shopping_companion.types import Change, Preference, Product, ProductSlot, Session, SessionRef, Task, Turn, Voucher

__all__ = [
    "GENERATOR_KIND",
    "ImportResult",
    "ImportSettings",
    "Importer",
    "Issue",
    "TaskReport",
    "import_tasks",
    "load_session_file",
    "locate_evidence",
    "read_task_file",
    "refuse_other_finished",
]

GENERATOR_KIND = "import"
REPORT_FILE = "import_report.json"


class ImportSettings(BaseModel):
    """How :class:`Importer` builds the benchmark.

    ``seed``: haystack draws, needle positions and dates (same seed, same files).
    ``sessions_per_user``: real haystack sessions per task (needles come on top).
    ``search``: run the searchable check (needs a searcher). ``search_top_k``: BM25 depth of it.
    ``alternatives_cap``: stop counting alternatives there. ``skip_invalid``: write the valid
    tasks of a file that has invalid ones. ``allow_open``: read tasks without a reference product
    (refused for now: :data:`OPEN_TASKS_UNSUPPORTED`). ``start_date`` / ``max_gap_days``: the
    dated history (first session ``start_date`` + 0–60 days, then 1–``max_gap_days`` days apart).
    """

    model_config = ConfigDict(extra="forbid")
    seed: int = 0
    sessions_per_user: int = Field(default=42, ge=1)
    search: bool = True
    search_top_k: int = Field(default=50, ge=1, le=50)
    alternatives_cap: int = Field(default=1000, ge=1)
    skip_invalid: bool = False
    allow_open: bool = False
    start_date: str = "2023-01-02"
    max_gap_days: int = Field(default=6, ge=1)
    max_conflict_rounds: int = Field(default=5, ge=1)
    min_session_turns: int = Field(default=2, ge=1)
    max_session_tokens: int = Field(default=1500, ge=20)
    sharegpt_share: float = Field(default=0.4, ge=0, le=1)

    def synth_config(self) -> SynthConfig:
        """The synthesis settings the reused synthesis functions read."""
        return SynthConfig(
            n_tasks=1,
            addon_share=0.0,
            seed=self.seed,
            sessions_per_user=self.sessions_per_user,
            searchable_top_k=self.search_top_k,
            alternatives_cap=self.alternatives_cap,
            start_date=self.start_date,
            max_gap_days=self.max_gap_days,
            max_conflict_rounds=self.max_conflict_rounds,
            min_session_turns=self.min_session_turns,
            max_session_tokens=self.max_session_tokens,
            sharegpt_share=self.sharegpt_share,
            minilm_tasks=0,
        )


@dataclass
class TaskReport:
    """What happened to one input line: ``status`` ``imported``, ``invalid`` or ``skipped``
    (valid, but not written because the file had errors and ``skip_invalid`` was off)."""

    line: int
    task_id: str | None
    task_type: str | None
    status: str = "invalid"
    issues: list[Issue] = field(default_factory=list)
    verification: dict[str, Any] | None = None

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]


@dataclass
class ImportResult:
    """The outcome of an import: one :class:`TaskReport` per input line (file order), the tasks
    built, the directory written (None when nothing was written) and its manifest."""

    file: Path
    reports: list[TaskReport]
    tasks: list[Task] = field(default_factory=list)
    out: Path | None = None
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def n_invalid(self) -> int:
        return sum(1 for r in self.reports if r.errors)

    @property
    def ok(self) -> bool:
        return self.n_invalid == 0

    def to_dict(self) -> dict[str, Any]:
        """The ``import_report.json`` record."""
        return {
            "file": str(self.file),
            "lines": len(self.reports),
            "imported": sum(r.status == "imported" for r in self.reports),
            "invalid": self.n_invalid,
            "out": str(self.out) if self.out else None,
            "tasks": [
                {
                    "line": r.line,
                    "task_id": r.task_id,
                    "task_type": r.task_type,
                    "status": r.status,
                    "errors": [asdict(i) for i in r.errors],
                    "warnings": [asdict(i) for i in r.warnings],
                    "verification": r.verification,
                }
                for r in self.reports
            ],
        }

    def error_summary(self, limit: int = 5) -> str:
        """One line for the CLI's error exit: how many lines failed and the first errors."""
        errs = [i for r in self.reports for i in r.errors]
        shown = "; ".join(i.text() for i in errs[:limit])
        more = f"; … {len(errs) - limit} more" if len(errs) > limit else ""
        return (
            f"{self.file}: {self.n_invalid} of {len(self.reports)} task line(s) are invalid ({shown}{more}); nothing "
            "was written (fix them, or pass --skip-invalid to import the valid ones)"
        )


def refuse_other_finished(out: Path, generator: dict[str, Any], config: dict[str, Any]) -> None:
    """Raise :class:`DataError` when ``out`` holds a finished benchmark that this import would not
    reproduce (another generator, file, or settings); as ``shopcomp synth`` does without
    ``--fresh``."""
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(manifest, dict):
        return
    if manifest.get("generator") == generator and manifest.get("config") == config:
        return
    old = manifest.get("generator") or {}
    what = (
        f"another import ({old.get('file')}, sha256 {str(old.get('sha256'))[:12]}…)"
        if old.get("kind") == GENERATOR_KIND and old != generator
        else ("the same file with other settings" if old == generator else f"a {old.get('kind', 'synth')} build")
    )
    raise DataError(f"{out} holds a finished benchmark from {what}; pass --force to replace it, or use another --out")


# --------------------------------------------------------------------------- checks


def _plain(text: str) -> str:
    """``text`` with runs of whitespace made one space and case folded: how a quote is compared."""
    return " ".join(text.split()).casefold()


def locate_evidence(src: TaskInput, evidence: str | EvidenceRef) -> tuple[tuple[int, int] | None, str | None]:
    """Where ``evidence`` (a preference's) points among ``src``'s needle sessions: ``((needle
    index, turn index), None)``, or ``(None, problem)``. A quote must occur in a user turn,
    compared after :func:`_plain` (whitespace and case only); the first such turn is taken. A
    reference must name a needle's ``session_id`` and one of its user turns."""
    needles = src.needle_sessions
    if isinstance(evidence, EvidenceRef):
        k = next((i for i, s in enumerate(needles) if s.session_id == evidence.session_id), None)
        if k is None:
            ids = ", ".join(repr(s.session_id) for s in needles if s.session_id) or "none"
            return None, f"no needle session has session_id {evidence.session_id!r} (the needles' ids: {ids})"
        turns = needles[k].turns
        if evidence.turn_index >= len(turns):
            return None, f"needle {evidence.session_id!r} has {len(turns)} turn(s); turn_index {evidence.turn_index}"
        if turns[evidence.turn_index].role != "user":
            return (
                None,
                f"turn {evidence.turn_index} of needle {evidence.session_id!r} is the assistant's, not the user's",
            )
        return (k, evidence.turn_index), None
    quote = _plain(evidence)
    said_by_assistant = None
    for k, s in enumerate(needles):
        for t, turn in enumerate(s.turns):
            if quote in _plain(turn.content):
                if turn.role == "user":
                    return (k, t), None
                said_by_assistant = said_by_assistant or (s.session_id or str(k), t)
    if said_by_assistant is not None:
        return None, (
            f"the quote is in an assistant turn (needle {said_by_assistant[0]}, turn {said_by_assistant[1]}); "
            "evidence is what the user said"
        )
    return None, "the quote is in no user turn of a needle session (compared ignoring whitespace and case)"


@dataclass
class _Checked:
    """A line that passed the per-line checks: its input, products, slots and issues so far;
    ``evidence`` maps the index of a preference with evidence to the index of its needle session."""

    line: int
    task_id: str
    src: TaskInput
    products: list[Product]
    slot_specs: list[SlotSpec]
    preferences: list[Preference]
    dont_care: list[Preference]
    currency: str | None
    issues: list[Issue]
    evidence: dict[int, int] = field(default_factory=dict)


def _slot_in_range(slot: int, n: int, fld: str, err: Callable[[str, str, str], None]) -> bool:
    """Whether ``slot`` names one of the task's ``n`` product slots; if not, ``err`` says so for ``fld``."""
    if slot < n:
        return True
    err(fld, "slot_out_of_range", f"slot {slot} is out of range: the task has {n} product slot(s) (allowed 0–{n - 1})")
    return False


class Importer:
    """Checks and builds imported tasks (module docstring).

    Args:
        products: the catalog the reference ids refer to.
        pool: real sessions for the haystacks (the built-in pool or ``--sessions``).
        settings: :class:`ImportSettings`.
        searcher: BM25 search for the searchable check (a ``ProductSearch`` or a callable
            ``(query, top_k[, shop_id=])``); None records ``searchable=None``.
        catalog_name: how error messages name the catalog.

    Raises :class:`~shopping_companion.errors.SynthError` (a DataError) when the pool is smaller
    than one user's haystack.
    """

    def __init__(
        self,
        products: list[Product],
        pool: list[Session],
        settings: ImportSettings | None = None,
        searcher: Any = None,
        catalog_name: str = "the catalog",
    ) -> None:
        self.settings = settings or ImportSettings()
        self.config = self.settings.synth_config()
        self.by_id = {p.product_id: p for p in products}
        self.products = products
        self.catalog_name = catalog_name
        self.m = default_matcher()
        self.reader = default_reader()
        self.matcher = CatalogMatcher(products)
        self.checks = Synthesizer(
            products,
            pool,
            self.config,
            searcher=searcher if self.settings.search else None,
            generator=TemplateGenerator(),
            plan=False,
            matcher=self.matcher,
        )

    # ------------------------------------------------------------------ per line

    def _slot_specs(
        self, src: TaskInput, products: list[Product | None], err: Callable[[str, str, str], None]
    ) -> list[SlotSpec]:
        """One :class:`SlotSpec` per known reference product, its product type given or the catalog's;
        ``err(field, check, message)`` records a slot without one."""
        # slots, product types
        specs: list[SlotSpec] = []
        for i, p in enumerate(products):
            if p is None:
                continue
            item = (src.product_types[i] if src.product_types and i < len(src.product_types) else None) or product_type(
                p
            )
            if not item:
                err(
                    f"product_types[{i}]" if src.product_types else "product_types",
                    "slots",
                    f"the catalog names no product type for {p.product_id} (category {p.category_path}); give "
                    "product_types",
                )
                continue
            specs.append(SlotSpec(i, p, item, item_synonyms(p, item), domain_of(p), [], []))
        return specs

    def _check_preferences(
        self, src: TaskInput, products: list[Product | None], err: Callable[[str, str, str], None]
    ) -> tuple[list[Preference], list[Preference]]:
        """``(preferences, does-not-matter features)`` of a line, each checked against its reference
        product by the rule judge's reading; ``err(field, check, message)`` records each problem."""
        n = len(products)
        prefs: list[Preference] = []
        for j, g in enumerate(src.preferences):
            if not _slot_in_range(g.slot, n, f"preferences[{j}].slot", err):
                continue
            pref = Preference(slot=g.slot, attribute=g.attribute, value=g.value, polarity=g.polarity)
            prefs.append(pref)
            p = products[g.slot]
            if p is None:
                continue
            key = self.m.key(g.attribute)
            ev = self.reader.check(p, pref)
            if not key.known and not self.reader.fields(p, key) and not ev.known:
                have = ", ".join(sorted(p.attributes)) or "none"
                err(
                    f"preferences[{j}].attribute",
                    "unknown_attribute",
                    f"{g.attribute!r} is not an attribute the value matcher knows and {p.product_id} has no field or "
                    f"text that states it (its attribute fields: {have})",
                )
                continue
            if g.polarity == "want" and not ev.satisfied:
                err(
                    f"preferences[{j}].value",
                    "unsatisfied_preference",
                    f"the reference product {p.product_id} does not have {g.attribute}={g.value!r} by the rule "
                    f"judge's reading ({ev.detail or 'no field or text states it'})",
                )
            if g.polarity == "avoid" and not ev.satisfied:
                err(
                    f"preferences[{j}].value",
                    "avoided_present",
                    f"the reference product {p.product_id} has the avoided {g.attribute}={g.value!r} ({ev.detail})",
                )
        wanted_keys = {(g.slot, self.m.key(g.attribute).name) for g in prefs}
        dont: list[Preference] = []
        for j, d in enumerate(src.dont_care):
            if not _slot_in_range(d.slot, n, f"dont_care[{j}].slot", err):
                continue
            if (d.slot, self.m.key(d.attribute).name) in wanted_keys:
                err(f"dont_care[{j}].attribute", "dont_care", f"{d.attribute!r} is also a preference of slot {d.slot}")
                continue
            value = d.value
            p = products[d.slot]
            if value is None and p is not None:
                fields = self.reader.fields(p, self.m.key(d.attribute))
                value = fields[0][0] if fields else None
                if value is None:
                    err(
                        f"dont_care[{j}].value",
                        "dont_care",
                        f"{p.product_id} has no field for {d.attribute!r}; give the value",
                    )
                    continue
            if value is not None:
                dont.append(Preference(slot=d.slot, attribute=d.attribute, value=value))
        return prefs, dont

    def _check_deal(
        self, src: TaskInput, products: list[Product | None], err: Callable[[str, str, str], None]
    ) -> tuple[list[Product], str | None]:
        """``(known reference products, currency)``: one currency; for an add-on deal, the voucher's
        shop, prices, ``min_spend`` and a feasible budget. ``err(field, check, message)`` records each
        problem."""
        n = len(products)
        # add-on deal: shop, prices, voucher, budget
        known = [p for p in products if p is not None]
        currency = src.currency
        if known:
            currencies = {p.currency for p in known}
            if len(currencies) > 1:
                err(
                    "reference_product_ids",
                    "currency",
                    f"the reference products have different currencies {currencies}",
                )
            elif currency is None:
                currency = known[0].currency
            elif currency != known[0].currency:
                err(
                    "currency",
                    "currency",
                    f"{currency!r}, but the reference products are priced in {known[0].currency}",
                )
        if src.task_type == "addon" and src.voucher is not None and len(known) == n:
            v = src.voucher
            for i, p in enumerate(known):
                if p.shop_id != v.shop_id:
                    err(
                        "voucher.shop_id",
                        "voucher_shop",
                        f"shop {v.shop_id!r} does not sell reference product {p.product_id} (its shop is {p.shop_id!r})",
                    )
                if p.price is None:
                    err(f"reference_product_ids[{i}]", "no_price", f"{p.product_id} has no price")
            if v.discount >= v.min_spend:
                err("voucher.discount", "voucher", f"discount {v.discount:g} is not below min_spend {v.min_spend:g}")
            if all(p.price is not None for p in known):
                total = round(sum(float(p.price or 0) for p in known), 2)
                if total + 1e-9 < v.min_spend:
                    err(
                        "voucher.min_spend",
                        "voucher_min_spend",
                        f"the reference bundle costs {total:g} < min_spend {v.min_spend:g}, so the voucher never "
                        "applies to it",
                    )
                elif src.budget is not None:
                    fits, _ = count_bundles(
                        [[float(p.price or 0)] for p in known], v.min_spend, v.discount, src.budget, 1
                    )
                    if not fits:
                        err(
                            "budget",
                            "budget_infeasible",
                            f"the reference bundle pays {total:g} − {v.discount:g} = {total - v.discount:g} > budget "
                            f"{src.budget:g}",
                        )
        return known, currency

    def _check_needles(self, line: int, src: TaskInput, prefs: list[Preference], issues: list[Issue]) -> dict[int, int]:
        """Every wanted preference is stated in a needle's user turn, or shown there by its evidence
        (:meth:`_resolvability`, which appends to ``issues``); an instruction that states one is a
        warning in ``issues``. Returns ``{preference index: needle index}`` of the evidence found."""
        evidence = self._resolvability(line, src, prefs, issues)
        for g in leaked_values([g for g in prefs if g.polarity == "want"], src.instruction):
            issues.append(
                Issue(
                    line,
                    "instruction",
                    "instruction_leaks_preference",
                    f"states the wanted {g.attribute}={g.value!r}, so memory is not needed for it",
                    "warning",
                )
            )
        return evidence

    def check_line(self, line: int, src: TaskInput) -> _Checked | TaskReport:
        """The per-line checks (module docstring) of one parsed line: a :class:`_Checked` when it
        has no error so far, else its :class:`TaskReport`."""
        tid = src.task_id or f"import-{line:05d}"
        issues: list[Issue] = []

        def err(fld: str, check: str, msg: str) -> None:
            issues.append(Issue(line, fld, check, msg))

        refs = list(src.reference_product_ids)
        if not refs:
            if not self.settings.allow_open:
                err(
                    "reference_product_ids",
                    "slots",
                    "empty: give one catalog product id per product slot (an open task without reference products "
                    "needs --allow-open and product_types)",
                )
                return TaskReport(line, tid, src.task_type, "invalid", issues)
            return self._check_open(line, tid, src)
        n = len(refs)
        if src.task_type == "single" and n != 1:
            err("reference_product_ids", "slots", f"a single task has exactly 1 product slot, got {n}")
        if src.task_type == "addon" and n < 2:
            err("reference_product_ids", "slots", f"an add-on deal has at least 2 product slots, got {n}")
        if src.product_types is not None and len(src.product_types) != n:
            err("product_types", "slots", f"one product type per slot: {n} slot(s), {len(src.product_types)} type(s)")
        for i, pid in enumerate(refs):
            if pid in refs[:i]:
                err(f"reference_product_ids[{i}]", "slots", f"{pid!r} is already slot {refs.index(pid)}")
        products: list[Product | None] = []
        for i, pid in enumerate(refs):
            p = self.by_id.get(pid)
            if p is None:
                err(
                    f"reference_product_ids[{i}]",
                    "unknown_product",
                    f"{pid!r} is not in {self.catalog_name} ({len(self.by_id)} products; ids are 'source:id', "
                    "e.g. 'myntra_styles:15970')",
                )
            products.append(p)
        if src.task_type == "single" and (src.voucher is not None or src.budget is not None):
            err("voucher" if src.voucher is not None else "budget", "slots", "a single task has no voucher or budget")
        if src.task_type == "addon":
            if src.voucher is None:
                err("voucher", "slots", "an add-on deal needs a voucher {shop_id, min_spend, discount}")
            if src.budget is None:
                err("budget", "slots", "an add-on deal needs a budget")
        dated = [s.date is not None for s in src.needle_sessions]
        if any(dated) and not all(dated):
            err("needle_sessions", "dates", "give a date for every needle session of the task or for none")

        specs = self._slot_specs(src, products, err)

        prefs, dont = self._check_preferences(src, products, err)

        known, currency = self._check_deal(src, products, err)

        evidence = self._check_needles(line, src, prefs, issues)
        if any(i.severity == "error" for i in issues):
            return TaskReport(line, tid, src.task_type, "invalid", issues)
        for s in specs:
            s.wanted = [
                Feature(key=g.attribute, label=label_for(g.attribute), value=g.value)
                for g in prefs
                if g.slot == s.index and g.polarity == "want"
            ]
            s.dont_care = [Feature(key=d.attribute, label=label_for(d.attribute), value=d.value) for d in dont]
        return _Checked(line, tid, src, known, specs, prefs, dont, currency, issues, evidence)

    def _resolvability(self, line: int, src: TaskInput, prefs: list[Preference], issues: list[Issue]) -> dict[int, int]:
        """The resolvable check of one line, appended to ``issues``: each preference's ``evidence``
        must point to a needle's user turn (``evidence``); a wanted value that no user turn states
        as the value matcher reads it (:func:`unstated_features`) is an error (``not_resolvable``,
        naming the preference and suggesting evidence), or a warning when its evidence was found.
        Returns ``{preference index: needle index}`` of the evidence found."""
        found: dict[int, int] = {}
        for j, g in enumerate(src.preferences):
            if g.evidence is None:
                continue
            where, problem = locate_evidence(src, g.evidence)
            if problem is not None:
                issues.append(Issue(line, f"preferences[{j}].evidence", "evidence", problem))
            elif where is not None:
                found[j] = where[0]
        needles = [
            Session(session_id=f"needle-{k}", turns=[Turn(role=t.role, content=t.content) for t in s.turns])
            for k, s in enumerate(src.needle_sessions)
        ]
        for g in unstated_features([g for g in prefs if g.polarity == "want"], needles):
            j = next(
                k
                for k, x in enumerate(src.preferences)
                if (x.slot, x.attribute, x.value, x.polarity) == (g.slot, g.attribute, g.value, g.polarity)
            )
            what = f"no user turn of a needle session states {g.attribute}={g.value!r} as the value matcher reads it"
            ev = src.preferences[j].evidence
            if j in found:
                turn = src.needle_sessions[found[j]]
                shown = ev if isinstance(ev, str) else f"turn {ev.turn_index}"  # type: ignore[union-attr]
                msg = f"{what}; accepted on its evidence in needle {turn.session_id or found[j]} ({shown!r})"
                issues.append(Issue(line, f"preferences[{j}]", "not_resolvable", msg, "warning"))
            elif ev is None:
                msg = (
                    f"{what} (the value as a phrase, a synonym, a paraphrase or a quantity); if a user turn says it "
                    f'in other words, give preferences[{j}] "evidence": a verbatim quote of that turn, or '
                    '{"session_id": ..., "turn_index": ...}'
                )
                issues.append(Issue(line, f"preferences[{j}]", "not_resolvable", msg))
        return found

    def _check_open(self, line: int, tid: str, src: TaskInput) -> _Checked | TaskReport:
        """The per-line checks of an open task (``--allow-open``, no reference product): a single
        task whose ``product_types`` names its one slot, preferences on attributes the value
        matcher knows (there is no product to read them from), does-not-matter values given, and
        needles stating every wanted preference. Whether some catalog product satisfies it is
        checked in :meth:`build` (the alternatives count)."""
        issues: list[Issue] = []

        def err(fld: str, check: str, msg: str) -> None:
            issues.append(Issue(line, fld, check, msg))

        if src.task_type != "single":
            err(
                "reference_product_ids",
                "open_task",
                "an open task must be a single task: an add-on deal's voucher and budget are checked against its "
                "reference products",
            )
        if not src.product_types or len(src.product_types) != 1 or not src.product_types[0].strip():
            err("product_types", "open_task", "an open task names its one product type: product_types: ['...']")
        if src.voucher is not None or src.budget is not None:
            err("voucher" if src.voucher is not None else "budget", "slots", "a single task has no voucher or budget")
        if issues:
            return TaskReport(line, tid, src.task_type, "invalid", issues)
        item = src.product_types[0].strip()  # type: ignore[index]
        prefs: list[Preference] = []
        for j, g in enumerate(src.preferences):
            if g.slot != 0:
                err(f"preferences[{j}].slot", "slot_out_of_range", f"slot {g.slot} is out of range (allowed 0–0)")
                continue
            if not self.m.key(g.attribute).known:
                err(
                    f"preferences[{j}].attribute",
                    "unknown_attribute",
                    f"{g.attribute!r} is not an attribute the value matcher knows; an open task has no reference "
                    "product to read it from (see judges/matching/data/keys.yaml for the known keys)",
                )
                continue
            prefs.append(Preference(slot=0, attribute=g.attribute, value=g.value, polarity=g.polarity))
        dont: list[Preference] = []
        for j, d in enumerate(src.dont_care):
            if d.slot != 0:
                err(f"dont_care[{j}].slot", "slot_out_of_range", f"slot {d.slot} is out of range (allowed 0–0)")
            elif d.value is None:
                err(f"dont_care[{j}].value", "dont_care", "an open task has no reference product: give the value")
            else:
                dont.append(Preference(slot=0, attribute=d.attribute, value=d.value))
        evidence = self._resolvability(line, src, prefs, issues)
        if issues:
            return TaskReport(line, tid, src.task_type, "invalid", issues)
        spec = SlotSpec(0, None, item, [item], "generic", [], [])
        spec.wanted = [
            Feature(key=g.attribute, label=label_for(g.attribute), value=g.value) for g in prefs if g.polarity == "want"
        ]
        spec.dont_care = [Feature(key=d.attribute, label=label_for(d.attribute), value=d.value) for d in dont]
        return _Checked(line, tid, src, [], [spec], prefs, dont, src.currency, issues, evidence)

    # ------------------------------------------------------------------ verification and haystack

    def build(self, c: _Checked) -> tuple[Task, list[Session], list[PoolSession], list[Issue]]:
        """Verify one checked task and give it a haystack: ``(task, needle sessions, haystack pool
        sessions in history order, issues)``; error issues mean the task is not imported."""
        cfg = self.config
        src = c.src
        issues = list(c.issues)
        rng = task_rng(self.settings.seed, c.line, "import")
        voucher = Voucher(**src.voucher.model_dump()) if src.voucher else None
        task = Task(
            task_id=c.task_id,
            task_type=src.task_type,
            split=src.split,
            instruction=src.instruction,
            user_id=src.user_id or f"user-{c.task_id}",
            history=[],
            needle_session_ids=[],
            preferences=c.preferences,
            dont_care=c.dont_care,
            slots=[
                ProductSlot(
                    product_type=s.product_type,
                    category_path=s.product.category_path if s.product is not None else [],
                    reference_product_id=s.product.product_id if s.product is not None else None,
                )
                for s in c.slot_specs
            ],
            voucher=voucher,
            budget=src.budget,
            currency=c.currency,
            seed=self.settings.seed,
            abilities=list(dict.fromkeys(src.abilities)),
        )

        def err(fld: str, check: str, msg: str, severity: Literal["error", "warning"] = "error") -> None:
            issues.append(Issue(c.line, fld, check, msg, severity))

        gold_ok: bool | None = None
        searchable: bool | None = None
        queries: list[str] = []
        ranks: list[int | None] = []
        if not task.is_open:
            gold_ok, reasons = gold_accepted(task, self.by_id)
            if not gold_ok:
                err(
                    "reference_product_ids",
                    "gold_rejected",
                    "the rule judge rejects the reference: " + "; ".join(reasons),
                )
            searchable, queries, ranks = self.checks.searchable(task)
        if searchable is False:
            missed = [f"slot {i} ({q!r})" for i, (q, r) in enumerate(zip(queries, ranks)) if r is None]
            err(
                "reference_product_ids",
                "not_searchable",
                f"not in the BM25 top {cfg.searchable_top_k} for " + ", ".join(missed),
                "warning",
            )
        n_alt, capped, slack, over = 0, False, None, None
        try:
            meta = {"voucher": voucher, "budget": src.budget}
            n_alt, capped, slack, over = self.checks.alternatives(task, c.slot_specs, meta)
        except CheckFailed as f:
            err("product_types", f.check, f"one product fits two slots ({f.detail}); choose distinct product types")
        if task.is_open and n_alt == 0:
            err(
                "product_types",
                "open_task",
                f"no catalog product is a {task.slots[0].product_type!r} satisfying every wanted preference, so no "
                "answer can succeed",
            )
        if any(i.severity == "error" for i in issues):
            return task, [], [], issues

        needles = [
            Session(
                session_id=opaque_id(task.task_id, "needle", str(j)),
                date=s.date.isoformat() if s.date else None,
                turns=[Turn(role=t.role, content=t.content) for t in s.turns],
                source=f"import-needle:{task.task_id}:{s.session_id or j}",
            )
            for j, s in enumerate(src.needle_sessions)
        ]
        feats = self.checks.wanted_features(c.slot_specs)
        spec = TaskSpec(task.task_id, c.line, task.task_type, c.slot_specs, len(needles), 0, voucher, src.budget)
        self._needle_conflicts(src, c.evidence, needles, feats, err)
        if any(i.severity == "error" for i in issues):
            return task, [], [], issues

        chosen, changes, conflicts = self._haystack(rng, spec, feats)
        if conflicts:
            err("needle_sessions", "conflicting_haystack", "no conflict-free haystack: " + conflicts[0].describe())
            return task, [], [], issues
        hay_ids = [opaque_id(ps.session.source or "pool", ps.session.session_id) for ps in chosen]
        history = self._dates(rng, hay_ids, needles, src)
        task = verified_task(
            task,
            history=history,
            needles=needles,
            changes=changes,
            search=(searchable, queries, ranks, cfg.searchable_top_k),
            alternatives=(n_alt, capped, slack, over),
            gold_accepted=gold_ok,
            by_evidence=unstated_features([p for p in task.preferences if p.polarity == "want"], needles),
        )
        needles = [n.model_copy(update={"date": None}) for n in needles]  # the history carries the dates
        return task, needles, chosen, issues

    def _needle_conflicts(self, src: TaskInput, evidence: dict[int, int], needles: list, feats: list, err) -> None:
        """Report the needles' conflicts (module docstring), less those a later-dated needle revises."""
        backed = {f"{label_for(src.preferences[j].attribute)}={src.preferences[j].value} "
                  f"(slot {src.preferences[j].slot})": (j, k) for j, k in evidence.items()}  # fmt: skip
        revisions = {  # the evidence needle, and every needle whose user turns state the value
            f.describe(): [n.session_id for i, n in enumerate(needles) if backed.get(f.describe(), (0, -1))[1] == i
                           or any(t.role == "user" and states_value(f.label, f.value, t.content) for t in n.turns)]
            for f in feats
        }  # fmt: skip
        dates = {n.session_id: n.date for n in needles if n.date}
        for n, s in enumerate(needles):
            for conflict in drop_superseded(self.checks.detector.find(s, feats, [], cache=False), dates, revisions):
                j, k = backed.get(conflict.feature, (None, n))
                if k == n:
                    err("needle_sessions", "needle_conflict", conflict.describe(), "warning")
                else:
                    name = src.needle_sessions[n].session_id or str(n)
                    msg = f"needle {name} contradicts the preference its evidence states: {conflict.describe()}"
                    err(f"preferences[{j}].evidence", "evidence_contradicted", msg)

    def _haystack(
        self, rng: random.Random, spec: TaskSpec, feats: list
    ) -> tuple[list[PoolSession], list[Change], list]:
        """Draw ``sessions_per_user`` pool sessions and swap those the conflict detector flags, as
        synthesis step 4 does (:meth:`Synthesizer.denoise`). Returns ``(chosen, changes, conflicts
        left)``."""
        chosen = self.checks.pool.select(rng, self.settings.sessions_per_user, None, 0, self.config.token_tolerance)
        return self.checks.denoise(spec, chosen, feats, rng)

    def _dates(
        self, rng: random.Random, hay_ids: list[str], needles: list[Session], src: TaskInput
    ) -> list[SessionRef]:
        """The dated history. Undated needles: inserted at seeded random positions, then
        :func:`assign_dates` over the whole order. Dated needles: the haystack is dated by
        :func:`assign_dates` and each needle goes, with its own date, after every haystack session
        dated on or before it."""
        start = (src.dates.start.isoformat() if src.dates and src.dates.start else None) or self.config.start_date
        if not needles or needles[0].date is None:
            order = list(hay_ids)
            for n in needles:
                order.insert(rng.randint(0, len(order)), n.session_id)
            return assign_dates(rng, order, start, self.config.max_gap_days)
        refs = assign_dates(rng, hay_ids, start, self.config.max_gap_days)
        for n in sorted(needles, key=lambda s: s.date or ""):
            pos = bisect.bisect_right([r.date for r in refs], n.date or "")
            refs.insert(pos, SessionRef(session_id=n.session_id, date=n.date or ""))
        return refs

    # ------------------------------------------------------------------ whole file

    def run(self, path: str | Path) -> tuple[list[TaskReport], list[Task], dict[str, Session]]:
        """Check and build every line of ``path``: ``(reports, tasks built, sessions by id)``.
        Tasks are built for every line without errors (the caller decides whether to write)."""
        parsed = read_task_file(path)
        reports: list[TaskReport] = []
        tasks: list[Task] = []
        sessions: dict[str, Session] = {}
        seen: dict[str, int] = {}
        for line, src, issues in parsed:
            if src is None:
                reports.append(
                    TaskReport(line, next((i.task_id for i in issues if i.task_id), None), None, "invalid", issues)
                )
                continue
            tid = src.task_id or f"import-{line:05d}"
            if tid in seen:
                msg = f"{tid!r} is already the id of line {seen[tid]}"
                reports.append(
                    TaskReport(line, tid, src.task_type, "invalid", [Issue(line, "task_id", "duplicate_task_id", msg)])
                )
                continue
            seen[tid] = line
            checked = self.check_line(line, src)
            if isinstance(checked, TaskReport):
                reports.append(checked)
                continue
            task, needles, chosen, issues = self.build(checked)
            rep = TaskReport(line, task.task_id, task.task_type, "imported", issues)
            reports.append(rep)
            if rep.errors:
                rep.status = "invalid"
                continue
            rep.verification = task.verification.model_dump(mode="json") if task.verification else None
            tasks.append(task)
            for s in needles:
                sessions[s.session_id] = s
            for ps in chosen:
                hid = opaque_id(ps.session.source or "pool", ps.session.session_id)
                sessions.setdefault(hid, Session(session_id=hid, turns=ps.session.turns, source=ps.session.session_id))
        used = {r.session_id for t in tasks for r in t.history}
        sessions = {k: v for k, v in sessions.items() if k in used}
        return reports, tasks, sessions


# --------------------------------------------------------------------------- the whole import


def import_tasks(
    file: str | Path,
    out: str | Path,
    products: list[Product],
    pool: list[Session],
    settings: ImportSettings | None = None,
    *,
    searcher: Any = None,
    sources: dict[str, Any] | None = None,
    force: bool = False,
    catalog_name: str = "the catalog",
) -> ImportResult:
    """Check ``file`` and, when it has no error (or ``settings.skip_invalid``), write the benchmark
    directory ``out`` (:func:`write_benchmark` + ``import_report.json``).

    ``products``: the catalog; ``pool``: haystack sessions; ``searcher``: for the searchable check
    (None: ``searchable=None``); ``sources``: provenance for the manifest; ``force``: replace a
    finished benchmark in ``out`` that this import would not reproduce.

    Returns the :class:`ImportResult`; ``result.out`` is None when nothing was written (the file
    had errors and ``skip_invalid`` is off, or no line was valid). Raises :class:`DataError` for
    an unreadable file, a pool too small, or (unless ``force``) another finished benchmark in
    ``out``. Task errors are not raised: they are in the result (the CLI exits 2 on them).
    """
    t0 = time.perf_counter()
    settings = settings or ImportSettings()
    f = Path(file)
    out = Path(out)
    generator = {"kind": GENERATOR_KIND, "file": str(f), "sha256": file_sha256(f) if f.is_file() else None}
    config = settings.model_dump(mode="json")
    if not force:
        refuse_other_finished(out, generator, config)
    imp = Importer(products, pool, settings, searcher=searcher, catalog_name=catalog_name)
    reports, tasks, sessions = imp.run(f)
    result = ImportResult(file=f, reports=reports, tasks=tasks)
    if result.n_invalid and not settings.skip_invalid:
        for r in reports:
            if r.status == "imported":
                r.status = "skipped"
        result.tasks = []
        return result
    if not tasks:
        return result
    from shopping_companion.benchmark.synthesis.stats import compute_stats

    st = compute_stats(tasks, sessions, products, embedder=None, minilm_tasks=0, seed=settings.seed)
    invalid = [
        {"line": r.line, "task_id": r.task_id, "checks": sorted({i.check for i in r.errors})}
        for r in reports
        if r.errors
    ]
    warn: dict[str, int] = {}
    for r in reports:
        for i in r.warnings:
            warn[i.check] = warn.get(i.check, 0) + 1
    manifest = {
        "format_version": FORMAT_VERSION,
        "generator": generator,
        "seed": settings.seed,
        "config": config,
        "sources": sources or {},
        "inputs": {"catalog_products": len(products), "pool": imp.checks.pool.describe()},
        "counts": task_counts(tasks, len(sessions), len(reports)),
        "verification": {
            "lines": len(reports),
            "passed": len(tasks),
            "invalid_lines": invalid,
            "warnings_by_check": dict(sorted(warn.items())),
            "checks_recorded": ["resolvable", "searchable", "conflict_free", "gold_accepted", "n_alternatives"],
            "searchable_checked": imp.checks.searcher is not None,
        },
        "stats_summary": stats_summary(st),
    }
    synth_out = SynthOutput(
        tasks=tasks,
        sessions=sessions,
        manifest=manifest,
        stats=st,
        build_log={"timings": {"total_s": round(time.perf_counter() - t0, 2)}},
    )
    write_benchmark(synth_out, out)
    result.out = out
    result.manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    (out / REPORT_FILE).write_text(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return result
