"""The baseline a rating model has to beat: ridge regression on one-hot ids, fit on the very
ratings the workload trains on and scored on the same held-out ratings.

One-hot ridge learns a weight per user, per movie and per value of every other column: every bias
of the hidden model (data.py), none of the user-movie taste interaction. For scale, beside it: the
RMSE of predicting the training mean, and the hidden model's own (its expected stars: the lowest
RMSE any model can reach, what is left being the noise and the rounding to whole stars).

    python -m movie_ratings.baseline --samples 307200      # a run of 300 steps of 1024
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from sklearn.linear_model import Ridge
from sklearn.preprocessing import OneHotEncoder
from threadpoolctl import threadpool_limits

from movie_ratings.data import FEATURES, Ratings

__all__ = ["ridge_baseline"]

ALPHA = 10.0  # the better of 1 and 10 on the held-out ratings (tuned in the baseline's favour)


def ridge_baseline(source: Ratings, train_samples: int, eval_samples: int) -> dict[str, float]:
    """RMSE and MAE on `eval_samples` held-out ratings of ridge regression on one-hot ids, fit on
    training ratings [0, train_samples) (a run of `steps` x `batch` reads exactly those); the RMSE
    of predicting the training mean (`mean_rmse`) and of the hidden model (`hidden_rmse`)."""
    train = source.read(0, train_samples)
    held = list(source.eval_batches(eval_samples, 65536))
    x, y = train["ids"][:, :, 0].numpy(), train["rating"].numpy()
    x_eval = torch.cat([b["ids"] for b in held])[:, :, 0].numpy()
    y_eval = torch.cat([b["rating"] for b in held]).numpy()
    encoder = OneHotEncoder(handle_unknown="ignore").fit(x)  # an id never seen in training: all zeros
    # One BLAS thread: threads waiting on busy cores (a machine shared with a training run) made
    # the fit many times slower.
    with threadpool_limits(1):
        ridge = Ridge(alpha=ALPHA, solver="lsqr").fit(encoder.transform(x), y)
        error = ridge.predict(encoder.transform(x_eval)) - y_eval
    user, movie = x_eval[:, FEATURES.index("user_id")], x_eval[:, FEATURES.index("movie_id")]
    hidden = source.catalogue.expected_stars(user, movie)
    return {
        "rmse": float(np.sqrt(np.mean(error**2))),
        "mae": float(np.mean(np.abs(error))),
        "mean_rmse": float(np.sqrt(np.mean((y_eval - y.mean()) ** 2))),
        "hidden_rmse": float(np.sqrt(np.mean((y_eval - hidden) ** 2))),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=307_200, help="training ratings (steps x batch of the run)")
    parser.add_argument("--eval-samples", type=int, default=65_536, help="held-out ratings (the run's eval.samples)")
    parser.add_argument("--users", type=int, default=162_541, help="the run's workload_options.users")
    parser.add_argument("--movies", type=int, default=62_423, help="the run's workload_options.movies")
    parser.add_argument("--seed", type=int, default=0, help="the run's data.seed")
    args = parser.parse_args(argv)
    figures = ridge_baseline(Ratings(args.users, args.movies, seed=args.seed), args.samples, args.eval_samples)
    print(f"one-hot ridge: rmse {figures['rmse']:.4f}  mae {figures['mae']:.4f}")
    print(f"global mean:   rmse {figures['mean_rmse']:.4f}")
    print(f"hidden model:  rmse {figures['hidden_rmse']:.4f}  (the lowest any model can reach)")


if __name__ == "__main__":
    main()
