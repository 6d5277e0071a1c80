"""Check that LLaMA-Factory tokenizes every SFT example exactly as the policy will see it.

SFT trains on LLaMA-Factory's rendering of the ShareGPT-with-tools data (its template); GRPO
rollouts and evaluation render the same conversations with the model's own chat template and
continue them token by token. A difference between the two (another wording of the tools section,
a space, a boundary where BPE merges differently) means the model is trained on sequences it never
sees afterwards — a silent hand-off failure a small model does not survive. This check encodes every
example with LLaMA-Factory's template (``encode_multiturn``) and with the tokenizer's chat template
(assistant turns as LLaMA-Factory renders them: the answer text, or ``<tool_call>`` blocks for a
``function_call`` turn) and compares the token ids.

Run it in the LLaMA-Factory environment::

    .venv-sft/bin/python -m shopping_companion.sft.lf_check --model MODEL_DIR --data DATA.jsonl \\
        --template qwen --out lf_check.json

Exit status 0 when every example matches, 3 when some do not (the first differences are printed
and written to ``--out``), 2 for a bad argument or a template LLaMA-Factory does not know.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["check_file", "main"]

_ROLES = {"human": "user", "gpt": "assistant", "function_call": "function", "observation": "observation"}


def _calls_text(value: str) -> str:
    calls = json.loads(value)
    if isinstance(calls, dict):
        calls = [calls]
    blocks = []
    for c in calls:
        args = c["arguments"] if isinstance(c["arguments"], dict) else json.loads(c["arguments"])
        blocks.append(
            "<tool_call>\n" + json.dumps({"name": c["name"], "arguments": args}, ensure_ascii=False) + "\n</tool_call>"
        )
    return "\n".join(blocks)


def chat_of(record: dict[str, Any]) -> list[dict[str, str]]:
    """The record as the policy's chat: system, user, assistant (content as LLaMA-Factory renders
    the target), tool messages."""
    chat = [{"role": "system", "content": record.get("system") or ""}]
    for m in record["conversations"]:
        role = m["from"]
        if role == "human":
            chat.append({"role": "user", "content": m["value"]})
        elif role == "observation":
            chat.append({"role": "tool", "content": m["value"]})
        elif role == "function_call":
            chat.append({"role": "assistant", "content": _calls_text(m["value"])})
        else:
            chat.append({"role": "assistant", "content": m["value"]})
    return chat


def check_file(model: str, data: str, template: str, limit: int | None = None) -> dict[str, Any]:
    """Compare LLaMA-Factory's ids with the chat template's for every record of ``data``."""
    from llamafactory.data.template import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    tmpl = get_template_and_fix_tokenizer(tok, DataArguments(template=template))
    n, bad, first = 0, 0, []
    with open(data, encoding="utf-8") as f:
        for line in f:
            if limit is not None and n >= limit:
                break
            rec = json.loads(line)
            n += 1
            msgs = [{"role": _ROLES[m["from"]], "content": m["value"]} for m in rec["conversations"]]
            pairs = tmpl.encode_multiturn(tok, msgs, rec.get("system"), rec.get("tools"))
            lf_ids = [i for source, target in pairs for i in source + target]
            tools = json.loads(rec["tools"]) if rec.get("tools") else None
            text = tok.apply_chat_template(chat_of(rec), tools=tools, tokenize=False)
            ours = tok.encode(text, add_special_tokens=False)
            if ours != lf_ids:
                bad += 1
                if len(first) < 3:
                    a = tok.decode(lf_ids)
                    k = next((i for i in range(min(len(a), len(text))) if a[i] != text[i]), min(len(a), len(text)))
                    first.append(
                        {
                            "record": n,
                            "llamafactory": a[max(0, k - 60) : k + 60],
                            "chat_template": text[max(0, k - 60) : k + 60],
                        }
                    )
    return {"records": n, "mismatches": bad, "template": template, "model": model, "examples": first}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m shopping_companion.sft.lf_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model directory whose tokenizer and chat template are used")
    ap.add_argument("--data", required=True, help="ShareGPT-with-tools JSONL written by `shopcomp sft export`")
    ap.add_argument("--template", default="qwen", help="LLaMA-Factory template (qwen3 | qwen3_nothink | qwen)")
    ap.add_argument("--out", help="write the result as JSON here")
    ap.add_argument("--limit", type=int, help="check only the first N records")
    a = ap.parse_args(argv)
    if not Path(a.data).is_file():
        print(f"--data: {a.data} does not exist", file=sys.stderr)
        return 2
    try:
        res = check_file(a.model, a.data, a.template, a.limit)
    except (ValueError, KeyError) as e:
        print(f"lf_check: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2, ensure_ascii=False), encoding="utf-8")
    print(
        f"LLaMA-Factory tokenization check: {res['records']} records, {res['mismatches']} differ from the chat template"
    )
    for ex in res["examples"]:
        print(
            f"  record {ex['record']}: LLaMA-Factory {ex['llamafactory']!r}\n    chat template {ex['chat_template']!r}"
        )
    return 0 if res["mismatches"] == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
