"""The baselines a digit classifier has to beat: logistic regression on the same split, on the raw
pixel intensities (the classic) and on one-hot of the workload's own ids (what a linear model makes
of the features the embedding model sees). Accuracy and macro-F1 on the held-out images.

    python -m digits.baseline
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.preprocessing import OneHotEncoder
from threadpoolctl import threadpool_limits

from digits.data import INTENSITIES, Vocabulary, split

__all__ = ["logistic_baselines"]


def logistic_baselines(
    vocabulary: Vocabulary, *, test_share: float = 0.2, seed: int = 0
) -> dict[str, dict[str, float]]:
    """{"raw": ..., "one_hot": ...}, each {"accuracy", "macro_f1"} on the held-out images of the
    split a run with this `test_share` and `data.seed` trains on."""
    train_x, train_y, test_x, test_y = split(test_share, seed)

    def intensities(x: np.ndarray) -> np.ndarray:
        return x.reshape(len(x), -1) / (INTENSITIES - 1)  # each pixel in [0, 1]

    encoder = OneHotEncoder(handle_unknown="ignore").fit(vocabulary.encode(train_x))  # an unseen id: all zeros
    # One BLAS thread: these fits are a fraction of a second of work, and BLAS threads waiting on
    # busy cores (a machine shared with a training run) made them a hundred times slower.
    with threadpool_limits(1):
        return {
            "raw": _fit(intensities(train_x), intensities(test_x), train_y, test_y),
            "one_hot": _fit(
                encoder.transform(vocabulary.encode(train_x)),
                encoder.transform(vocabulary.encode(test_x)),
                train_y,
                test_y,
            ),
        }


def _fit(train_x: Any, test_x: Any, train_y: np.ndarray, test_y: np.ndarray) -> dict[str, float]:
    predicted = LogisticRegression(max_iter=5000).fit(train_x, train_y).predict(test_x)
    return {
        "accuracy": float(accuracy_score(test_y, predicted)),
        "macro_f1": float(f1_score(test_y, predicted, average="macro")),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--test-share", type=float, default=0.2, help="the run's workload_options.test_share")
    parser.add_argument("--seed", type=int, default=0, help="the run's data.seed")
    parser.add_argument("--pixel-levels", type=int, default=5)
    parser.add_argument("--patch-levels", type=int, default=3)
    parser.add_argument("--patch-size", type=int, default=2)
    args = parser.parse_args(argv)
    vocabulary = Vocabulary(args.pixel_levels, args.patch_levels, args.patch_size)
    for name, scores in logistic_baselines(vocabulary, test_share=args.test_share, seed=args.seed).items():
        print(f"logistic regression, {name:7s}: accuracy {scores['accuracy']:.4f}  macro-F1 {scores['macro_f1']:.4f}")


if __name__ == "__main__":
    main()
