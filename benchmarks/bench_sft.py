"""Benchmark the SFT data pipeline (Shopping Companion §6.1, App. D) on real data.

Synthesises ``--tasks`` tasks (template generator, real catalog and SGD conversations; the paper's
80/20 train/test split), rejection-samples ``--trials`` episodes per train task with the scripted
reference policy (a rule baseline, not an LLM) through :func:`shopping_companion.sft.collect.collect`
(real environment, BM25 index, MiniLM memory, rule judge), splits the kept stages into step-level
examples and exports them for LLaMA-Factory (decontamination included).

Prints: collect throughput (episodes/s, median over ``--repeats`` fresh collect runs), export
wall time (median), the number of step-level examples and their distribution over stages, tools
and turns. The product index is built once into the cache (about a minute) on first use.

    python benchmarks/bench_sft.py [--tasks 40] [--trials 2] [--concurrency 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopping_companion.benchmark.evaluate import EvalSettings  # noqa: E402
from shopping_companion.benchmark.synth import SynthConfig, synthesize  # noqa: E402
from shopping_companion.envs.env import EnvConfig  # noqa: E402
from shopping_companion.judges.rule import RuleJudge  # noqa: E402
from shopping_companion.llm.base import Sampling  # noqa: E402
from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary  # noqa: E402
from shopping_companion.memory.loaders import load_sgd  # noqa: E402
from shopping_companion.paths import resolve_data_dir  # noqa: E402
from shopping_companion.pipeline import load_catalog, make_embedder, memory_factory, open_product_search, prewarm_memory  # noqa: E402
from shopping_companion.sft.collect import KeepPolicy, collect  # noqa: E402
from shopping_companion.sft.examples import step_examples  # noqa: E402
from shopping_companion.sft.export import export_dataset  # noqa: E402
from shopping_companion.sft.collect import read_kept  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--keep", default="stage")
    a = ap.parse_args()

    data = resolve_data_dir()
    t0 = time.perf_counter()
    search = open_product_search(data)
    products, _ = load_catalog(data / "catalog" / "products.jsonl.gz")
    sgd = load_sgd(data / "conversations" / "sgd_dialogues.jsonl.gz")

    def searcher(q, k):
        return [h["product_id"] for h in search.search(q, top_k=k)]

    bench = synthesize(
        products,
        sgd,
        SynthConfig(n_tasks=a.tasks, seed=a.seed, sessions_per_user=40, addon_share=0.5, test_fraction=0.2),
        searcher=searcher,
    )
    teacher = ReferencePolicy(build_attribute_vocabulary(products))
    embedder = make_embedder()
    train = [t for t in bench.tasks if t.split == "train"]
    test = [t for t in bench.tasks if t.split == "test"]
    prewarm_memory(bench.tasks, bench.sessions, embedder)
    judge = RuleJudge(lambda ids: {p: search.get(p) for p in ids if search.get(p) is not None}, sessions=bench.sessions)
    print(f"setup {time.perf_counter() - t0:.1f}s: {len(train)} train / {len(test)} test tasks", flush=True)

    settings = EvalSettings(trials=a.trials, sampling=Sampling(temperature=0.6, seed=a.seed), env=EnvConfig())
    rates, exports = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeats):
            out = Path(tmp) / f"collect{r}"
            s = collect(
                train,
                teacher,
                search,
                memory_factory(bench.sessions, embedder),
                judge,
                out,
                settings,
                policy=KeepPolicy(rule=a.keep),
                concurrency=a.concurrency,
                progress=False,
            )
            rates.append(s.episodes_per_s)
            t1 = time.perf_counter()
            examples = step_examples(read_kept(out))
            summary = export_dataset(
                examples,
                Path(tmp) / f"export{r}",
                test_tasks=test,
                train_tasks=bench.tasks,
                sessions=bench.sessions,
                template="qwen3",
            )
            exports.append(time.perf_counter() - t1)
            print(
                f"run {r}: {s.new_episodes} episodes in {s.wall_s:.1f}s ({s.episodes_per_s:.2f}/s), Succ "
                f"{s.succ_rate:.3f}, kept {s.kept} stages {s.kept_by_stage}; {summary.examples} examples, "
                f"export {exports[-1]:.2f}s",
                flush=True,
            )
    print(
        json.dumps(
            {
                "tasks": {"train": len(train), "test": len(test)},
                "trials": a.trials,
                "concurrency": a.concurrency,
                "keep": a.keep,
                "teacher": teacher.name,
                "collect_episodes_per_s_median": round(statistics.median(rates), 3),
                "export_s_median": round(statistics.median(exports), 3),
                "examples": summary.stats,
                "skipped": summary.skipped,
                "decontamination": {
                    k: summary.decontamination[k]
                    for k in ("test_tasks", "violations", "exposures", "shared_with_train")
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
