"""Calibrate the value matcher's embedding-fallback threshold on labelled value pairs.

Reads ``tests/fixtures/value_pairs.jsonl`` (``{"attribute", "a", "b", "equivalent"}``: pairs a
careful shopper labelled as meaning the same value or not, mostly ones the lexicon cannot decide:
a user's own wording against a catalog value, values outside every vocabulary), embeds
``"<attribute>: <value>"`` with MiniLM (the stack's embedder, cached), and prints, for candidate
thresholds, accuracy / precision / recall of ``cosine ≥ threshold`` as "equivalent". The chosen
threshold maximises accuracy subject to precision ≥ ``--min-precision`` (default 0.9: a false
"same" turns a wrong value into a reward, so precision matters more than recall); ties go to the
higher threshold. ``--write`` stores it in ``shopping_companion/judges/matching/data/calibration.yaml``.
Also reports 5-fold cross-validated accuracy of the choice (threshold picked on 4 folds, scored on
the fifth), so the figure is not the training fit alone. Usage::

    python benchmarks/calibrate_value_similarity.py [--pairs FILE] [--min-precision 0.9] [--write]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import random
import statistics
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PAIRS = ROOT / "tests" / "fixtures" / "value_pairs.jsonl"
CALIBRATION = ROOT / "shopping_companion" / "judges" / "matching" / "data" / "calibration.yaml"


def load_pairs(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for i, r in enumerate(rows):
        missing = {"attribute", "a", "b", "equivalent"} - set(r)
        if missing:
            raise SystemExit(f"{path}: line {i + 1}: missing fields {sorted(missing)}")
    return rows


def cosines(rows: list[dict], embedder) -> np.ndarray:
    left = [f"{r['attribute']}: {r['a'].strip().lower()}" for r in rows]
    right = [f"{r['attribute']}: {r['b'].strip().lower()}" for r in rows]
    va, vb = embedder.encode(left), embedder.encode(right)
    return (np.asarray(va) * np.asarray(vb)).sum(axis=1)


def scores(sims: np.ndarray, labels: np.ndarray, t: float) -> tuple[float, float, float]:
    pred = sims >= t
    tp = int((pred & labels).sum())
    acc = float((pred == labels).mean())
    prec = tp / max(1, int(pred.sum()))
    rec = tp / max(1, int(labels.sum()))
    return acc, prec, rec


def choose(sims: np.ndarray, labels: np.ndarray, min_precision: float) -> float:
    best_t, best = 1.0, (-1.0, 0.0)
    for t in np.round(np.arange(0.30, 0.99, 0.01), 2):
        acc, prec, _ = scores(sims, labels, float(t))
        if prec < min_precision:
            continue
        if (acc, t) >= (best[0], best[1]):
            best_t, best = float(t), (acc, float(t))
    return best_t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS)
    ap.add_argument("--min-precision", type=float, default=0.9)
    ap.add_argument("--write", action="store_true", help="store the threshold in data/calibration.yaml")
    args = ap.parse_args()

    from shopping_companion.pipeline import make_embedder

    rows = load_pairs(args.pairs)
    labels = np.array([bool(r["equivalent"]) for r in rows])
    sims = cosines(rows, make_embedder())
    print(
        f"{len(rows)} pairs ({int(labels.sum())} equivalent); cosine median equivalent "
        f"{statistics.median(sims[labels]):.3f}, not equivalent {statistics.median(sims[~labels]):.3f}"
    )
    print(f"{'threshold':>9} {'accuracy':>8} {'precision':>9} {'recall':>6}")
    for t in (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
        acc, prec, rec = scores(sims, labels, t)
        print(f"{t:9.2f} {acc:8.3f} {prec:9.3f} {rec:6.3f}")
    t = choose(sims, labels, args.min_precision)
    acc, prec, rec = scores(sims, labels, t)
    print(f"chosen threshold {t:.2f}: accuracy {acc:.3f}, precision {prec:.3f}, recall {rec:.3f}")

    idx = list(range(len(rows)))
    random.Random(0).shuffle(idx)
    folds = [idx[k::5] for k in range(5)]
    cv = []
    for k in range(5):
        test = np.array(folds[k])
        train = np.array([i for j, f in enumerate(folds) if j != k for i in f])
        tk = choose(sims[train], labels[train], args.min_precision)
        cv.append(scores(sims[test], labels[test], tk)[0])
    print(
        f"5-fold cross-validated accuracy: median {statistics.median(cv):.3f} (folds {', '.join(f'{x:.2f}' for x in cv)})"
    )

    if args.write:
        CALIBRATION.write_text(
            "# Embedding-fallback threshold of the value matcher (judges/matching/values.py), written by\n"
            "# benchmarks/calibrate_value_similarity.py from tests/fixtures/value_pairs.jsonl. Do not edit by hand.\n"
            f"version: 1\nmodel: all-MiniLM-L6-v2\nthreshold: {t:.2f}\nmin_precision: {args.min_precision}\n"
            f"pairs: {len(rows)}\naccuracy: {acc:.3f}\nprecision: {prec:.3f}\nrecall: {rec:.3f}\n"
            f"cv_accuracy: {statistics.median(cv):.3f}\ndate: {_dt.date.today().isoformat()}\n",
            encoding="utf-8",
        )
        print(f"wrote {CALIBRATION}")


if __name__ == "__main__":
    main()
