"""Pydantic models shared by every part of Shopping Companion.

One environment, one trajectory type and one reward breakdown are used by evaluation, SFT data
collection and GRPO, so a number in an evaluation report means the same as a reward in training.
All models are plain pydantic v2 models and serialise losslessly to JSON (``model_dump_json``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from typing_extensions import TypedDict

TaskType = Literal["single", "addon"]
Split = Literal["train", "test"]
Role = Literal["system", "user", "assistant", "tool"]
Stage = Literal[1, 2]
Polarity = Literal["want", "avoid"]
#: The memory ability a task tests (LongMemEval's abilities, for preferences): ``extraction``: each
#: preference stated once; ``knowledge_update``: a later-dated session revises a value an earlier one
#: stated (gold: the latest); ``multi_session``: one product's preferences spread over three or more
#: sessions; ``temporal``: the request points to a past conversation by its date; ``abstention``: the
#: request invites a preference the user never stated (none may be invented).
Ability = Literal["extraction", "knowledge_update", "multi_session", "temporal", "abstention"]
ABILITIES: tuple[Ability, ...] = ("extraction", "knowledge_update", "multi_session", "temporal", "abstention")
#: A counterfactual variant of a task (``Task.stress``): ``needle_removed``: the needle sessions are
#: gone (gold: no preference); ``stale_before``: a session contradicting a preference is added before
#: the needles; ``needle_oldest``: the needles are moved to the start of the history.
Stress = Literal["needle_removed", "stale_before", "needle_oldest"]
STRESS_VARIANTS: tuple[Stress, ...] = ("needle_removed", "stale_before", "needle_oldest")
#: How a stage ended. ``answered``: a parsable answer; ``max_turns``: the turn limit;
#: ``token_budget``: the GRPO token budget; ``invalid_output``: N consecutive invalid turns
#: (``EnvConfig.max_invalid_turns``); ``length``: the same, when truncation (finish_reason
#: ``length``) caused the last of them; ``context_length``: the server refused the prompt as longer
#: than the model's context (a model failure, scored); ``backend_error``: the backend failed after its
#: retries (recorded, not scored); ``running``: not finished. (An unexpected exception inside an
#: episode gives an :class:`EpisodeResult` with ``error`` set and no stages; it is not scored.)
TerminationReason = Literal[
    "answered", "max_turns", "token_budget", "invalid_output", "length", "context_length", "backend_error", "running"
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- catalog


AttributeOrigin = Literal["title", "description", "features", "category", "details", "llm"]


class AttributeSource(_Model):
    """Where an extracted attribute value was read (provenance).

    ``source``: the product field the value was read from (``details``: an Amazon ``details``
    entry; ``llm``: reserved for a value a model stated without a span in any field -- the bundled
    LLM extractor never writes it, it names the field its span was verified in); ``span``: the
    matched text, verbatim from that field (at most 120 characters); ``extractor``: who extracted
    it and which version (``"rules-v1"``, ``"llm:<model>"``).
    """

    source: AttributeOrigin
    span: str = Field(max_length=120)
    extractor: str


class Product(_Model):
    """One real product of the catalog.

    ``product_id`` is globally unique (``source:id``). ``shop_id`` is the store identity used by
    the ``shop_id`` filter of ``product_search`` and by same-shop vouchers: the seller at the
    retailer where it is known, otherwise the brand's own store at that retailer.
    ``price`` is in ``currency`` units (``None`` when the source has no price).
    ``attributes`` are the source's structured key/values (strings after normalisation);
    ``options`` lists purchasable variants, e.g. ``{"size": ["S", "M", "L"]}``.
    ``attribute_sources`` marks the keys of ``attributes`` that were *extracted* from the
    product's text (:mod:`shopping_companion.catalog.extract`) with their provenance; a key
    without an entry is the source's own structured field. Every key of ``attribute_sources`` is a
    key of ``attributes`` (ValueError otherwise).
    """

    product_id: str
    title: str
    source: str
    shop: str = Field(description="The retailer, e.g. 'Myntra (India)'.")
    shop_id: str
    seller: str | None = None
    brand: str | None = None
    price: float | None = Field(default=None, ge=0)
    list_price: float | None = Field(default=None, ge=0)
    currency: str | None = None
    category_path: list[str] = Field(default_factory=list)
    description: str | None = None
    features: list[str] = Field(default_factory=list)
    attributes: dict[str, str] = Field(default_factory=dict)
    attribute_sources: dict[str, AttributeSource] = Field(default_factory=dict)
    options: dict[str, list[str]] = Field(default_factory=dict)
    rating: float | None = None
    rating_count: float | None = None
    url: str | None = None
    image: str | None = None

    @model_validator(mode="after")
    def _sources_name_attributes(self) -> Product:
        stray = [k for k in self.attribute_sources if k not in self.attributes]
        if stray:
            raise ValueError(f"attribute_sources names keys that are not in attributes: {stray}")
        return self

    def extracted(self, key: str) -> bool:
        """The attribute ``key`` was extracted from text (it has provenance), not a source field."""
        return key in self.attribute_sources

    @property
    def category(self) -> str:
        """The finest category level, or '' when the source has none."""
        return self.category_path[-1] if self.category_path else ""


# --------------------------------------------------------------------------- memory


class Turn(_Model):
    """One utterance of a past conversation. ``role`` is 'user' or 'assistant'."""

    role: Literal["user", "assistant"]
    content: str


class Session(_Model):
    """One past conversation of a user. ``date`` is an ISO date ``YYYY-MM-DD``."""

    session_id: str
    date: str | None = None
    turns: list[Turn]
    source: str = ""


class SessionRef(_Model):
    """A session of a user's history, in chronological order, with its date."""

    session_id: str
    date: str


# --------------------------------------------------------------------------- tasks


class Preference(_Model):
    """A user preference: ``slot`` is the index of the product of the task it applies to."""

    slot: int = 0
    attribute: str
    value: str
    polarity: Polarity = "want"


class Voucher(_Model):
    """A same-shop voucher: spend at least ``min_spend`` in ``shop_id`` and get ``discount`` off."""

    shop_id: str
    min_spend: float = Field(ge=0)
    discount: float = Field(ge=0)


class ProductSlot(_Model):
    """What the instruction asks for in one slot: a product type and the reference product.

    ``reference_product_id`` is None for an *open* slot (a task imported with ``shopcomp
    import-tasks --allow-open``): any catalog product of the type that satisfies the slot's
    preferences is a valid answer, and the tool-wise product reward uses the semantic fallback."""

    product_type: str
    category_path: list[str] = Field(default_factory=list)
    reference_product_id: str | None = None


class Change(_Model):
    """One edit made while denoising a task (§4 step 3), recorded with the task.

    ``kind``: ``session_replaced`` (a haystack session holding a statement that conflicts with a
    wanted feature was swapped for another real session). ``session_id`` and ``replacement_id``
    are the *source* ids of the sessions (e.g. ``sharegpt:abc``), ``detail`` quotes the
    conflicting statement and names the feature, ``detector`` says who found it (``rule`` or
    ``llm``).
    """

    kind: Literal["session_replaced"] = "session_replaced"
    session_id: str | None = None
    replacement_id: str | None = None
    detail: str = ""
    detector: str = "rule"


class Verification(_Model):
    """The automatic checks of one task (§4 step 5), recorded with the task.

    ``resolvable``: the value matcher reads every wanted feature in a user turn of a needle session;
    ``accepted_by_evidence``: those it does not, accepted on the task author's evidence quote
    (``shopcomp import-tasks``; ``resolvable`` is then False), as ``attribute=value (slot i)``.
    ``searchable``: every reference product is in the BM25 top ``search_top_k`` for the query in
    ``search_queries`` (one per slot; ``search_ranks`` are 1-based ranks, None = not found);
    None when no search engine was given. ``conflict_free``: no haystack statement contradicts a
    wanted feature. ``gold_accepted``: the rule judge scores the reference product(s) as a success
    (None for an open task, which has no reference product). ``n_alternatives``: other catalog
    products (single) or same-shop bundles (add-on) the rule
    judge would also accept, counted up to a cap (``alternatives_capped`` = the cap was hit).
    Add-on only: ``budget_slack`` = budget − (reference total − discount) in the task currency,
    ``over_budget_share`` = share of single-product substitutions (same shop, same product type,
    preferences ignored) that break the budget.
    """

    resolvable: bool
    accepted_by_evidence: list[str] = Field(default_factory=list)
    searchable: bool | None = None
    conflict_free: bool
    gold_accepted: bool | None
    n_alternatives: int = Field(ge=0)
    alternatives_capped: bool = False
    search_top_k: int = 50
    search_queries: list[str] = Field(default_factory=list)
    search_ranks: list[int | None] = Field(default_factory=list)
    budget_slack: float | None = None
    over_budget_share: float | None = None


class Task(_Model):
    """One benchmark instance (Shopping Companion Bench, §4).

    ``history`` lists every session of the user's memory in chronological order; the needle
    sessions carrying the preferences are among them. ``preferences`` are the gold wanted
    features (F = ``len(preferences)``); ``dont_care`` are real attributes of the reference
    product(s) that the user does not care about. ``slots`` has one entry per requested product
    (N = ``n_products``).
    """

    task_id: str
    task_type: TaskType = "single"
    split: Split = "test"
    instruction: str
    user_id: str
    history: list[SessionRef]
    needle_session_ids: list[str]
    preferences: list[Preference]
    dont_care: list[Preference] = Field(default_factory=list)
    slots: list[ProductSlot]
    voucher: Voucher | None = None
    budget: float | None = None
    currency: str | None = None
    seed: int = 0
    # Benchmark construction records (§4 steps 3 and 5); optional so older files still load.
    n_alternatives: int | None = Field(default=None, ge=0, description="other accepted products/bundles (capped)")
    verification: Verification | None = None
    changes: list[Change] = Field(default_factory=list)
    # Memory abilities and stress variants (docs/benchmark.md, "Abilities and stress variants").
    abilities: list[Ability] = Field(default_factory=list, description="what the task tests; empty: not tagged")
    superseded: list[Preference] = Field(
        default_factory=list,
        description="values the history states for a gold attribute that are not the answer: revised "
        "(knowledge_update) or said in another dated conversation (temporal, stale_before); named distractors",
    )
    stale_session_ids: list[str] = Field(default_factory=list, description="the sessions stating ``superseded``")
    unstated: list[Preference] = Field(
        default_factory=list,
        description="abstention: attributes the request invites a preference on that the user never stated "
        "(value: the reference product's, the one a guessing agent would name)",
    )
    stress: Stress | None = Field(default=None, description="the stress variant this task is, if any")
    variant_of: str | None = Field(default=None, description="a stress variant's original task_id")

    @property
    def n_products(self) -> int:
        return len(self.slots)

    @property
    def reference_product_ids(self) -> list[str]:
        """The reference product ids of the slots that have one (open slots have none)."""
        return [s.reference_product_id for s in self.slots if s.reference_product_id]

    @property
    def is_open(self) -> bool:
        """Some product slot has no reference product (judged on type and preferences only)."""
        return any(not s.reference_product_id for s in self.slots)

    @field_validator("slots")
    @classmethod
    def _at_least_one_slot(cls, v: list[ProductSlot]) -> list[ProductSlot]:
        if not v:
            raise ValueError("slots: a task needs at least one product slot")
        return v


# --------------------------------------------------------------------------- trajectories


class ToolCall(_Model):
    """A parsed tool call. ``arguments`` is the decoded JSON object."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str


class ToolResult(_Model):
    """The observation a tool call produced.

    ``content`` is exactly the text shown to the agent. ``returned_ids`` are the session ids
    (memory tools) or product ids (product tools) the call returned, in order, so tool-wise
    rewards (Eqs. 8–9) are exact. ``error`` is set when the call was rejected; the episode goes on.
    """

    call_id: str
    name: str
    content: str
    returned_ids: list[str] = Field(default_factory=list)
    error: str | None = None


class FormatFlags(_Model):
    """Per-turn protocol checks behind the format reward (Eq. 11).

    ``think_ok``: thinking tags balanced and at most one thinking block. ``tool_json_ok``: every
    tool-call block parsed as strict JSON and no tool call after the answer. ``has_answer``: the
    turn holds a complete answer block. ``n_answers`` / ``n_think_blocks``: counts of complete
    answer blocks / thinking blocks (None in results written before these fields existed).
    ``tool_after_answer``: a tool call follows the answer. ``errors``: the parser's messages.
    """

    think_ok: bool = True
    tool_json_ok: bool = True
    has_answer: bool = False
    n_answers: int | None = None
    n_think_blocks: int | None = None
    tool_after_answer: bool = False
    errors: list[str] = Field(default_factory=list)


class Step(_Model):
    """One assistant turn and what the environment answered."""

    assistant_text: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolResult] = Field(default_factory=list)
    format: FormatFlags = Field(default_factory=FormatFlags)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    #: The server's finish reason for this turn (``stop``, ``length``, ``tool_calls`` …), if given.
    finish_reason: str | None = None
    #: Separate reasoning text of this turn (``reasoning_content`` / ``reasoning``), if any.
    reasoning: str | None = None

    @field_validator("prompt_tokens", "completion_tokens", mode="before")
    @classmethod
    def _sane_token_count(cls, v: Any) -> int | None:
        """A token count is a non-negative int up to 10^8; anything else (a server's ``-5`` or
        ``1e308``, also in results written before this check) is unknown (None)."""
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if v != v or not 0 <= v <= 100_000_000:
            return None
        return int(v)


class Message(BaseModel):
    """A chat message in OpenAI form (role, content, optional tool_call_id / name)."""

    model_config = ConfigDict(extra="allow")
    role: Role
    content: str
    name: str | None = None
    tool_call_id: str | None = None


class Trajectory(_Model):
    """Everything one stage of one episode did.

    ``messages`` is the exact chat the policy saw and produced (system prompt first).
    ``final_answer`` is the text inside ``<answer>…</answer>`` (None if the stage ended otherwise).
    Stage 1 fills ``identified_preferences``; stage 2 fills ``recommended_ids``.
    """

    task_id: str
    stage: Stage
    mode: str = "two_stage"
    messages: list[Message] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    final_answer: str | None = None
    identified_preferences: list[Preference] | None = None
    recommended_ids: list[str] = Field(default_factory=list)
    termination: TerminationReason = "running"

    @property
    def tool_results(self) -> list[ToolResult]:
        return [r for s in self.steps for r in s.tool_results]


#: Why the rule judge is not sure of one decision (``docs/judge.md``, "Selective verdicts"):
#: ``unknown_key`` an attribute name no canonical key resolves; ``value_outside_vocabulary`` a value
#: the vocabularies and units cannot read, compared by its words or by embeddings only;
#: ``indirect_statement`` no user turn states an answer's preference in words the lexicon reads
#: (the user may have said it in other words); ``not_stated`` the product's fields and text state
#: nothing the reader recognises about the attribute; ``field_text_conflict`` a structured field and
#: the title disagree; ``adjacent_type`` the product's type is a sibling of the slot's, or a broader
#: one its category cannot settle; ``unknown_type`` the slot or the product names no known type.
UncertainReason = Literal[
    "unknown_key",
    "value_outside_vocabulary",
    "indirect_statement",
    "not_stated",
    "field_text_conflict",
    "adjacent_type",
    "unknown_type",
]
#: What uncertain items earn (the reward spec's ``uncertain``): ``no_credit`` nothing (and no
#: penalty); ``credit`` they count as decided in the agent's favour; ``unscored`` the stage is not
#: scored (no reward, no gradient), like a judge failure.
UncertainPolicy = Literal["no_credit", "credit", "unscored"]


class VerdictItem(TypedDict):
    """One decision behind a verdict (``docs/judge.md``, "Selective verdicts"): a typed dict,
    validated as part of its :class:`Verdict` (a verdict holds many items, and plain dicts of
    atomic values cost the garbage collector nothing in long runs; models would).

    ``kind``: ``match`` (stage 1: a gold preference reported by the answer; m1), ``grounding``
    (stage 1: an answer preference matching no gold one: harmless, or spurious and counted in h1),
    ``attribute`` (stage 2: a gold preference met by its slot's product; m2), ``type`` (stage 2: the
    product is of its slot's type; q2) or ``bundle`` (stage 2, add-on: u2). ``label``: what was
    decided (``colour=navy``, ``product 1: sofa``). ``slot``: the product slot (0 for single tasks).
    ``answer``: indexes into the answer's preferences (match: the one matched, or for an uncertain
    miss those that may state it in other words; grounding: the one judged). ``ok``: the decision
    favours the agent (matched, harmless, satisfied, relevant, within budget). ``confident``: the
    rule judge decided on explicit evidence, else ``reason`` says why not (required exactly when
    not confident; :class:`Verdict` refuses anything else). ``decided_by``: ``rule``, or ``llm`` for
    an uncertain item an LLM judge decided (a cascade). ``detail``: the evidence in words.
    """

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    kind: Literal["match", "grounding", "attribute", "type", "bundle"]
    label: str
    slot: int
    ok: bool
    confident: bool
    reason: UncertainReason | None
    decided_by: Literal["rule", "llm"]
    answer: tuple[int, ...]
    detail: str


class Verdict(_Model):
    """The judge's structured fields for one stage (Shopping Companion §5.3, App. C.1).

    Stage 1: ``q1`` query relevance ∈ {0,1}, ``m1`` matched preference attributes ∈ [0, F],
    ``c1`` matched product count ∈ [0, N] (add-on only), ``h1`` spurious identified preferences
    ≥ 0 (hallucinated, contradictory, piled on one attribute, misattributed to another product or
    not an attribute value; our precision rule, see ``docs/judge.md``; None = not assessed).
    Stage 2: ``p2`` product validity ∈ {0,1}, ``q2`` relevance ∈ {0,1}, ``m2`` matched preference
    attributes ∈ [0, F], ``n2`` matched product count ∈ [0, N] and ``u2`` budget feasibility ∈
    {0,1} (add-on only). ``success`` is Succ for stage 2 (Eq. 5) and "all preferences found" for
    stage 1. ``failed`` marks a judge failure: such a verdict must never be scored as 0.
    ``no_answer`` marks a stage that ended without a final answer: every score field is 0,
    ``success`` is False, Acc is 0 and no judge was asked
    (:func:`~shopping_companion.judges.base.no_answer_verdict`).

    ``items``: every decision behind the fields (rule judge and cascade; empty for other judges
    and results written before them), ``uncertain``: how many the rule judge was not sure of,
    ``uncertain_policy``: what those earned when the rule judge itself scored them (None when
    none was left to a policy), ``llm_calls``: LLM-judge verdicts asked for this stage (a cascade
    asks only when an item is uncertain).
    """

    judge: str
    stage: Stage
    F: int = Field(ge=0)
    N: int = Field(ge=1)
    b: Literal[0, 1] = 0
    q1: int | None = None
    m1: float | None = None
    c1: float | None = None
    h1: int | None = Field(default=None, ge=0)
    p2: int | None = None
    q2: int | None = None
    m2: float | None = None
    n2: float | None = None
    u2: int | None = None
    success: bool = False
    matched: list[str] = Field(default_factory=list, description="gold preferences judged matched")
    reasons: list[str] = Field(default_factory=list)
    failed: bool = False
    no_answer: bool = False
    items: list[VerdictItem] = Field(default_factory=list)
    uncertain: int = Field(default=0, ge=0)
    uncertain_policy: UncertainPolicy | None = None
    llm_calls: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _items_consistent(self) -> Verdict:
        for i, it in enumerate(self.items):
            if it["confident"] == (it["reason"] is not None):
                raise ValueError(f"items[{i}].reason: required exactly when confident is False")
        if self.items and self.uncertain != sum(not it["confident"] for it in self.items):
            raise ValueError("uncertain: must count the items that are not confident")
        return self


class RewardBreakdown(_Model):
    """The reward of one stage trajectory: ``total`` and every named component.

    ``per_tool_call`` holds r(u) for every tool call in order (Eqs. 8–9).
    """

    total: float
    components: dict[str, float] = Field(default_factory=dict)
    per_tool_call: list[float] = Field(default_factory=list)
    per_turn: list[float] = Field(default_factory=list)


class StageResult(_Model):
    """A judged and rewarded stage trajectory."""

    trajectory: Trajectory
    verdict: Verdict
    reward: RewardBreakdown


class EpisodeResult(_Model):
    """One evaluated episode (both stages in ``two_stage`` mode): one line of results.jsonl.

    ``acc`` is the stage-1 preference accuracy m1/F; ``succ`` is the stage-2 success (Eq. 5).
    ``one_stage`` episodes hold one stage-2 result and the stage-1 fields in
    ``preference_verdict``; ``oracle`` episodes hold one stage-2 result and ``acc`` = 1.0 (not
    applicable). ``simulator`` records the user simulator (name, model, seed) and its feedback.
    """

    task_id: str
    task_type: TaskType
    mode: str
    hint: str = "none"
    policy: str
    trial: int = 0
    seed: int = 0
    stages: list[StageResult]
    acc: float
    succ: bool
    wall_s: float
    error: str | None = None
    simulator: dict[str, Any] | None = Field(
        default=None,
        description="the user simulator: name, model, seed, hint, consulted, feedback, source, redacted, reason",
    )
    preference_verdict: Verdict | None = Field(
        default=None, description="one_stage mode: the stage-1 fields judged on the single trajectory (Acc)"
    )
