"""The LLM generator: instructions, preference dialogues and conflict checks written by any
OpenAI-compatible endpoint (Shopping Companion §4 steps 2–3, App. A.2).

The prompts are ours, following the paper's intent: the instruction names the products (and, for an
add-on deal, the shop, voucher and budget) but no preference; the dialogues reveal each wanted
feature in the user's own words across several turns, mostly indirectly (another word, a family or
comparison, an experience; limits as situations in other units), and every value must still be
stated in a way :func:`~.verify.how_stated` recognises; the conflict check reads one haystack session
and lists the user's statements that contradict a wanted feature.

Every call:

* asks for one JSON object and validates it with a pydantic model, then checks its content (the
  instruction states no wanted value and names the amounts; every wanted value is said by the user;
  conflict turn indexes exist). An invalid answer is sent back with the problem and the model tries
  again, up to ``max_invalid`` attempts; then :class:`~.common.GenerationError` is raised and the
  build re-draws or drops the task;
* is cached in SQLite by the SHA-256 of ``(model, messages, temperature, top_p, max_tokens,
  seed)``, so a rebuild makes no request and reproduces the same files;
* goes through :class:`~shopping_companion.llm.openai_backend.OpenAIBackend` (HTTP retries with
  backoff, each attempt within ``timeout_s`` and each request within the backend's total
  ``deadline_s`` of wall clock; the key comes from the endpoint's environment variable and is never
  stored). A backend that still fails, or whose endpoint's circuit breaker opens (consecutive
  connection failures / timeouts), stops the build with :class:`~.common.SynthError` naming the
  endpoint and error; so do ``max_consecutive_failures`` invalid answers in a row.

Tasks are spread round-robin over the configured endpoints (the paper split its synthesis evenly
over four models).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shopping_companion.benchmark.synthesis.common import GenerationError, SynthError
from shopping_companion.benchmark.synthesis.config import GeneratorConfig, LLMEndpoint
from shopping_companion.benchmark.synthesis.catalog_view import Feature
from shopping_companion.benchmark.synthesis.conflicts import Conflict, is_revision
from shopping_companion.benchmark.synthesis.generators import SlotSpec, TaskSpec, format_money
from shopping_companion.benchmark.synthesis.verify import evidence_text, states_value
from shopping_companion.llm.replies import ReplyCache, extract_json
from shopping_companion.types import Session, Turn

__all__ = ["LLMGenerator"]

SYSTEM_PROMPT = (
    "You produce synthetic data for a benchmark of shopping assistants. Follow the rules exactly and "
    "answer with a single JSON object, nothing else: no explanation, no markdown fences."
)


# --------------------------------------------------------------------------- output schemas


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class InstructionOut(_Out):
    instruction: str = Field(min_length=10, max_length=800)


class TurnOut(_Out):
    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=4000)


class SessionOut(_Out):
    turns: list[TurnOut] = Field(min_length=2, max_length=40)


class DialoguesOut(_Out):
    sessions: list[SessionOut] = Field(min_length=1, max_length=8)


class SentenceOut(_Out):
    sentence: str = Field(min_length=5, max_length=400)


class ConflictOut(_Out):
    turn_index: int = Field(ge=0)
    statement: str = ""
    feature: str = ""
    reason: str = ""


class ConflictsOut(_Out):
    conflicts: list[ConflictOut] = Field(default_factory=list, max_length=50)


# --------------------------------------------------------------------------- helpers


def _feature_line(slot: SlotSpec, label: str, value: str, addon: bool, numeric: bool = False) -> str:
    about = f" (about {slot.synonyms[0] if slot.synonyms else slot.product_type})" if addon else ""
    limit = " (a limit: say it as a situation, in other units if natural)" if numeric else ""
    return f'- {label}: "{evidence_text(label, value)}"{about}{limit}'


def _numbers(s: str) -> list[float]:
    """Every number written in ``s`` (thousands separators allowed)."""
    out = []
    for m in re.findall(r"\d[\d,]*(?:\.\d+)?", s):
        try:
            out.append(float(m.replace(",", "")))
        except ValueError:
            continue
    return out


# --------------------------------------------------------------------------- generator


class LLMGenerator:
    """Generator backed by OpenAI-compatible endpoints (module docstring).

    Args:
        config: the ``generator`` section of the build config (``kind: llm``).
        cache_path: SQLite cache file (default: ``config.cache_path`` or
            ``<cache dir>/llm/generations.sqlite``).
        backend_factory: ``endpoint -> ChatBackend`` (default: :class:`OpenAIBackend`); tests may
            pass their own, e.g. pointed at a local server.
    """

    name = "llm"

    def __init__(
        self,
        config: GeneratorConfig,
        cache_path: str | Path | None = None,
        backend_factory: Callable[[LLMEndpoint], Any] | None = None,
    ) -> None:
        if not config.endpoints:
            raise SynthError("generator.endpoints: the LLM generator needs at least one endpoint")
        self.config = config
        if cache_path is None:
            if config.cache_path:
                cache_path = Path(config.cache_path).expanduser()
            else:
                from shopping_companion.paths import cache_dir

                cache_path = cache_dir() / "llm" / "generations.sqlite"
        self.cache = ReplyCache(cache_path)
        factory = backend_factory or self._default_backend
        self.backends = [factory(e) for e in config.endpoints]
        self.stats = {"requests": 0, "cache_hits": 0, "invalid": 0, "failed_calls": 0}
        self._consecutive_failures = 0

    def _default_backend(self, e: LLMEndpoint) -> Any:
        from shopping_companion.llm.openai_backend import OpenAIBackend

        return OpenAIBackend.for_role(
            "synth",
            e.model,
            base_url=e.base_url,
            api_key_env=e.api_key_env,
            timeout_s=self.config.timeout_s,
            max_retries=self.config.http_retries,
        )

    def describe(self) -> dict[str, Any]:
        return self.config.describe()

    # ------------------------------------------------------------------ the call loop

    def _call(self, spec: TaskSpec, purpose: str, prompt: str, parse: Callable[[dict[str, Any]], Any]) -> Any:
        """Ask, validate, retry with feedback; cached. ``parse`` raises ValueError with a message
        for the model when the content is not acceptable."""
        from shopping_companion.llm.base import BackendError, CircuitOpenError, Sampling

        ep_i = spec.index % len(self.backends)
        backend, endpoint = self.backends[ep_i], self.config.endpoints[ep_i]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        seed = int(hashlib.sha256(f"{spec.seed}:{purpose}".encode()).hexdigest()[:8], 16)
        sampling = Sampling(
            temperature=self.config.temperature,
            top_p=self.config.top_p,
            top_k=None,
            max_tokens=self.config.max_tokens,
            seed=seed,
        )
        last_error = ""
        for _attempt in range(self.config.max_invalid):
            payload = {
                "model": endpoint.model,
                "messages": messages,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "max_tokens": sampling.max_tokens,
                "seed": seed,
            }
            key = ReplyCache.key(payload)
            text = self.cache.get(key)
            if text is None:
                try:
                    msg = backend.chat(messages, None, sampling)
                except (BackendError, CircuitOpenError) as e:
                    raise SynthError(
                        f"LLM generator: endpoint {endpoint.model!r} at {endpoint.base_url or 'default URL'} "
                        f"failed ({e}); the build stopped, finished tasks are kept and a rerun resumes"
                    ) from None
                self.stats["requests"] += 1
                text = msg.content or ""
                self.cache.put(key, text, model=endpoint.model)
            else:
                self.stats["cache_hits"] += 1
            try:
                result = parse(extract_json(text, which="first"))
            except (ValueError, ValidationError) as e:
                self.stats["invalid"] += 1
                last_error = _short_error(e)
                messages = messages + [
                    {"role": "assistant", "content": text[:4000]},
                    {
                        "role": "user",
                        "content": f"That answer is not acceptable: {last_error}. "
                        "Answer again with one corrected JSON object only.",
                    },
                ]
                continue
            self._consecutive_failures = 0
            return result
        self.stats["failed_calls"] += 1
        self._consecutive_failures += 1
        if self._consecutive_failures >= self.config.max_consecutive_failures:
            raise SynthError(
                f"LLM generator: {self._consecutive_failures} calls in a row gave no valid answer after "
                f"{self.config.max_invalid} attempts each (model {endpoint.model!r}; last problem: {last_error}); "
                "the build stopped, finished tasks are kept and a rerun resumes"
            )
        raise GenerationError(f"{purpose}: no valid answer after {self.config.max_invalid} attempts ({last_error})")

    # ------------------------------------------------------------------ step 2

    def instruction(self, spec: TaskSpec, rng: random.Random) -> str:
        values = sorted({evidence_text(f.label, f.value) for _, f in spec.wanted})
        forbidden = "; ".join(f'"{v}"' for v in values)
        if spec.task_type == "single":
            item = spec.slots[0].product_type
            prompt = (
                "Write the message a shopper types to an online shopping assistant.\n"
                f"The shopper wants exactly one item: {item}.\n"
                "Rules:\n"
                "- 1 to 3 sentences, first person, casual chat style.\n"
                "- Name the kind of item. Ask the assistant to choose one that fits the shopper's taste, "
                "which the assistant knows from earlier conversations.\n"
                "- Give no preference and no detail about the item: no colour, material, fit, brand, size, "
                f"style or price. Never use these words: {forbidden}.\n"
                'Return {"instruction": "<the message>"}.'
            )
        else:
            assert spec.voucher is not None and spec.budget is not None
            cur = spec.currency
            items = "\n".join(f"  {i + 1}. {s.product_type}" for i, s in enumerate(spec.slots))
            prompt = (
                "Write the message a shopper types to an online shopping assistant about an add-on deal.\n"
                f"Shop: {spec.shop_name} (shop id: {spec.voucher.shop_id})\n"
                f"Voucher: {format_money(spec.voucher.discount, cur)} off an order of at least "
                f"{format_money(spec.voucher.min_spend, cur)} from this shop\n"
                f"Items to buy, in this order:\n{items}\n"
                f"Budget after the discount: at most {format_money(spec.budget, cur)}\n"
                "Rules:\n"
                "- 2 to 5 sentences, first person, casual chat style.\n"
                "- Mention the shop with its shop id written exactly, the voucher's discount and minimum "
                "spend, every item in the given order, and the budget. Write every amount exactly as given.\n"
                "- Ask the assistant to choose items that fit the shopper's taste, known from earlier "
                "conversations. Give no preference: no colour, material, fit, brand, size or style. "
                f"Never use these words: {forbidden}.\n"
                'Return {"instruction": "<the message>"}.'
            )

        def parse(obj: dict[str, Any]) -> str:
            out = InstructionOut.model_validate(obj).instruction.strip()
            leaked = [f.value for _, f in spec.wanted if states_value(f.label, f.value, out)]
            if leaked:
                raise ValueError(f"the message states preferences it must not state: {leaked}")
            if spec.task_type == "addon":
                assert spec.voucher is not None and spec.budget is not None
                numbers = _numbers(out)
                for name, amount in (
                    ("budget", spec.budget),
                    ("minimum spend", spec.voucher.min_spend),
                    ("discount", spec.voucher.discount),
                ):
                    if not any(abs(x - amount) < 0.005 for x in numbers):
                        raise ValueError(f"the {name} {format_money(amount, spec.currency)} is missing")
                if spec.voucher.shop_id not in out:
                    raise ValueError(f"the shop id {spec.voucher.shop_id} is missing")
            return out

        return self._call(spec, "instruction", prompt, parse)

    # ------------------------------------------------------------------ step 3

    def _groups(self, spec: TaskSpec) -> list[list[tuple[SlotSpec, Any]]]:
        pairs = [(s, f) for s in spec.slots for f in s.wanted]
        if spec.task_type == "single":
            n = max(1, min(spec.n_needles, len(pairs)))
            return [pairs[j::n] for j in range(n)]
        n = max(1, min(spec.n_needles, len(spec.slots)))
        size = math.ceil(len(spec.slots) / n)
        groups = []
        for i in range(0, len(spec.slots), size):
            chunk = spec.slots[i : i + size]
            groups.append([(s, f) for s in chunk for f in s.wanted])
        return groups

    def dialogues(self, spec: TaskSpec, rng: random.Random) -> list[list[Turn]]:
        groups = self._groups(spec)
        addon = spec.task_type == "addon"
        blocks = []
        for j, g in enumerate(groups):
            lines = "\n".join(_feature_line(s, f.spoken_label, f.value, addon, f.kind == "numeric") for s, f in g)
            blocks.append(f"Conversation {j + 1} must reveal:\n{lines}")
        dont = sorted({f.spoken_label for s in spec.slots for f in s.dont_care})
        prompt = (
            f"Write {len(groups)} separate past conversation(s) between a user and an AI assistant. The user "
            "mentions personal preferences in passing, through habits, experiences and opinions, the way "
            "people do in everyday chat; never as a shopping list or a request.\n\n"
            + "\n\n".join(blocks)
            + "\n\nRules:\n"
            "- Each preference is said by the USER, in its own user turn. In most of them do NOT use the "
            "quoted catalog words: express the value indirectly, with another everyday word for it (half "
            "sleeves for short sleeves), by its family or a comparison (navy: in the blue family but really "
            "deep, like a night sky), or by an experience that implies it (short sleeves: anything past the "
            "elbow stays in the cupboard). The meaning must stay exactly the same value, never a broader one. "
            "Say limits as situations, often in other units (at most 150 cm: the alcove gives me no more than "
            "1.5 m). Brands, sizes and names may be said as quoted.\n"
            + (
                "- Make clear which kind of item each preference is about, using everyday words for it.\n"
                if addon
                else ""
            )
            + "- 6 to 12 turns per conversation, alternating user and assistant, starting with the user. "
            "Start on another everyday topic and drift to the preferences.\n"
            "- No shop names, prices, vouchers or plans to buy something. Do not contradict a preference.\n"
            + (
                f"- The user does not care about: {', '.join(dont)}. They may say so, but must not name a value.\n"
                if dont
                else ""
            )
            + 'Return {"sessions": [{"turns": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}]}'
            f" with exactly {len(groups)} session(s), in the order above."
        )

        def parse(obj: dict[str, Any]) -> list[list[Turn]]:
            out = DialoguesOut.model_validate(obj)
            if len(out.sessions) != len(groups):
                raise ValueError(f"expected {len(groups)} sessions, got {len(out.sessions)}")
            sessions: list[list[Turn]] = []
            for j, (sess, g) in enumerate(zip(out.sessions, groups)):
                turns = [Turn(role=t.role, content=t.content.strip()) for t in sess.turns]
                if turns[0].role != "user" or any(a.role == b.role for a, b in zip(turns, turns[1:])):
                    raise ValueError(f"session {j + 1}: turns must alternate, starting with the user")
                users = [t.content for t in turns if t.role == "user"]
                missing = [
                    evidence_text(f.label, f.value)
                    for _, f in g
                    if not any(states_value(f.label, f.value, u) for u in users)
                ]
                if missing:
                    raise ValueError(
                        f"session {j + 1}: the user never states these values in a way that can be checked: "
                        f"{missing}; use the quoted words, a listed synonym, or a limit with its unit"
                    )
                sessions.append(turns)
            return sessions

        return self._call(spec, "dialogues", prompt, parse)

    # ------------------------------------------------------------------ memory abilities

    def revision(self, spec: TaskSpec, slot: SlotSpec, old: Feature, new: Feature, rng: random.Random) -> list[Turn]:
        item = slot.synonyms[0] if slot.synonyms else slot.product_type
        prompt = (
            "Write one past conversation between a user and an AI assistant in which the user changes a "
            f"preference about {item}.\n"
            f'Before: the user liked {old.spoken_label} "{evidence_text(old.label, old.value)}".\n'
            f'Now: the user wants {new.spoken_label} "{evidence_text(new.label, new.value)}".\n'
            "Rules:\n"
            "- 4 to 8 turns, alternating user and assistant, starting with the user.\n"
            "- In one user turn the user says they used to go for the old value and no longer do (use the "
            "words 'used to', 'no longer' or 'not anymore'), gives a reason a person would give (a bad "
            "experience, a new job, a move, a friend's remark), and says what they want now. Say the new "
            "value in a sentence of its own with no negation in it, with the quoted words or a close "
            "everyday synonym.\n"
            "- No shop names, prices or plans to buy something.\n"
            'Return {"turns": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}'
        )

        def parse(obj: dict[str, Any]) -> list[Turn]:
            turns = [Turn(role=t.role, content=t.content.strip()) for t in SessionOut.model_validate(obj).turns]
            if turns[0].role != "user" or any(a.role == b.role for a, b in zip(turns, turns[1:])):
                raise ValueError("turns must alternate, starting with the user")
            users = [t.content for t in turns if t.role == "user"]
            if not any(states_value(new.label, new.value, u) and is_revision(u) for u in users):
                raise ValueError(
                    f"no user turn says 'used to' / 'no longer' / 'not anymore' and states "
                    f'"{evidence_text(new.label, new.value)}" in a way that can be checked'
                )
            return turns

        return self._call(spec, f"revision:{slot.index}:{new.label}", prompt, parse)

    def _sentence(self, spec: TaskSpec, purpose: str, prompt: str, must: str) -> str:
        """One sentence from the model that contains ``must`` and states no wanted value."""

        def parse(obj: dict[str, Any]) -> str:
            out = SentenceOut.model_validate(obj).sentence.strip()
            if must.lower() not in out.lower():
                raise ValueError(f"the sentence must contain {must!r} exactly")
            leaked = [f.value for _, f in spec.wanted if states_value(f.label, f.value, out)]
            if leaked:
                raise ValueError(f"the sentence states preferences it must not state: {leaked}")
            return out

        return self._call(spec, purpose, prompt, parse)

    def temporal_reference(self, spec: TaskSpec, when: str, rng: random.Random) -> str:
        prompt = (
            "Write one sentence a shopper adds to a request to an online shopping assistant, asking it to go "
            f"by what the shopper said about the item in their conversation of {when}.\n"
            f"Rules: first person, casual; write '{when}' exactly; name no colour, material, size, brand or "
            'other preference.\nReturn {"sentence": "<the sentence>"}.'
        )
        return self._sentence(spec, f"temporal:{when}", prompt, when)

    def abstention_request(self, spec: TaskSpec, slot: SlotSpec, label: str, rng: random.Random) -> str:
        about = f" for the {slot.product_type}" if spec.task_type == "addon" else ""
        prompt = (
            "Write one sentence a shopper adds to a request to an online shopping assistant, asking it to "
            f"pick the {label} the shopper usually likes{about}, as if the assistant knew it.\n"
            f"Rules: first person, casual; write the word '{label}' exactly; name no value of it and no "
            'other preference.\nReturn {"sentence": "<the sentence>"}.'
        )
        return self._sentence(spec, f"abstention:{slot.index}:{label}", prompt, label)

    # ------------------------------------------------------------------ topic distractors

    def distractors(self, spec: TaskSpec, rng: random.Random, n: int = 2) -> list[list[Turn]]:
        """The template generator's topic distractors (no LLM call; same guarantees)."""
        from shopping_companion.benchmark.synthesis.generators import TemplateGenerator

        return TemplateGenerator().distractors(spec, rng, n)

    # ------------------------------------------------------------------ denoising

    def find_conflicts(self, spec: TaskSpec, sessions: list[Session]) -> list[Conflict]:
        out: list[Conflict] = []
        wanted = "\n".join(
            f'- {f.spoken_label} = "{f.value}" (for the {s.product_type})' for s in spec.slots for f in s.wanted
        )
        brands = sorted({s.product.brand for s in spec.slots if s.product.brand})
        dont = (
            ", ".join(sorted({f"{f.spoken_label} ({s.product_type})" for s in spec.slots for f in s.dont_care}))
            or "nothing"
        )
        for sess in sessions:
            user_turns = [(i, t.content) for i, t in enumerate(sess.turns) if t.role == "user"]
            if not user_turns:
                continue
            text, budget = [], 12000
            for i, c in user_turns:
                c = c if len(c) <= 1500 else c[:1500] + " [...]"
                if budget - len(c) < 0:
                    break
                budget -= len(c)
                text.append(f"[{i}] user: {c}")
            valid = {i for i, _ in user_turns}
            prompt = (
                "A user is about to buy something with these preferences:\n"
                f"{wanted}\n"
                + (f"Brands of the chosen products: {', '.join(brands)}\n" if brands else "")
                + f"They do not care about: {dont}.\n\n"
                "Below are the user's turns from one of their past conversations, each with its turn index. "
                "List every statement by the user that contradicts a preference above: disliking or avoiding a "
                "wanted value, preferring a different value of the same attribute for the same kind of item, "
                "disliking one of the brands, or stating a different size. Statements about other things, and "
                "about the features they do not care about, are not contradictions.\n\n"
                + "\n".join(text)
                + '\n\nReturn {"conflicts": [{"turn_index": <int>, "statement": "<quote>", "feature": '
                '"<attribute=value>", "reason": "<short>"}]}, with an empty list if there is none.'
            )

            def parse(obj: dict[str, Any], valid: set[int] = valid) -> list[ConflictOut]:
                res = ConflictsOut.model_validate(obj).conflicts
                bad = [c.turn_index for c in res if c.turn_index not in valid]
                if bad:
                    raise ValueError(f"turn_index {bad} is not one of the user turns {sorted(valid)}")
                return res

            for c in self._call(spec, f"conflicts:{sess.session_id}", prompt, parse):
                out.append(
                    Conflict(
                        sess.session_id,
                        c.turn_index,
                        c.statement or sess.turns[c.turn_index].content[:200],
                        c.feature or "?",
                        "llm",
                        detector="llm",
                    )
                )
        return out


def _short_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        errs = e.errors()[:3]
        return "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'answer'}: {err['msg']}" for err in errs)
    return str(e)[:300]
