"""The simple baselines SASRec is judged against, on the same leave-one-out split, by counting:

* popularity: the K items most often in the training histories, less those the user has seen;
* co-occurrence: the items that most often came right after the user's last item in the training
  histories (item-to-item transitions: what a first-order Markov chain recommends), less those the
  user has seen, filled up with the popular ones.

Both rank against the whole catalogue and exclude the user's earlier items, as the workload's
evaluation does; both count each user's training items only (never a held-out one). Plain numpy,
apart from the workload's torch code, so a test can hold one against the other.

    python -m sasrec.baselines            # the default data (ML-1M's shape)
    python -m sasrec.baselines 1000 500   # users, items
"""

from __future__ import annotations

import argparse

import numpy as np

from sasrec.data import Histories, Sequences, generate

__all__ = ["baseline_recall", "next_items", "popularity_order"]


def popularity_order(histories: Histories) -> np.ndarray:
    """Item ids, most frequent in the training histories first (ties: lower id first)."""
    training = np.ones(len(histories.flat), dtype=bool)
    training[histories.offsets[1:] - 1] = False  # each user's last item is held out
    counts = np.bincount(histories.flat[training], minlength=histories.items + 1)
    counts[0] = -1  # the padding id is never recommended
    return np.argsort(-counts, kind="stable")[: histories.items]


def next_items(histories: Histories) -> tuple[np.ndarray, np.ndarray]:
    """Transitions of the training histories: (starts [items + 2], followers) where the items that
    followed item a are followers[starts[a] : starts[a + 1]], most frequent first."""
    flat = histories.flat.astype(np.int64)
    last = histories.offsets[1:] - 1
    pair = np.ones(len(flat) - 1, dtype=bool)
    pair[last[:-1]] = False  # a user's last item followed by the next user's first
    pair[last - 1] = False  # the held-out item as a follower
    before, after = flat[:-1][pair], flat[1:][pair]
    keys, counts = np.unique(before * (histories.items + 1) + after, return_counts=True)
    first, follower = keys // (histories.items + 1), keys % (histories.items + 1)
    order = np.lexsort((follower, -counts, first))  # by item, then most frequent, then lower id
    starts = np.searchsorted(first[order], np.arange(histories.items + 2))
    return starts, follower[order]


def baseline_recall(source: Sequences, users: np.ndarray, k: int = 10) -> dict[str, float]:
    """recall@k of each baseline for the held-out item of each of `users`."""
    h = source.histories
    popular = popularity_order(h)
    starts, followers = next_items(h)
    hits = {"popularity": 0, "cooccurrence": 0}
    for user in users:
        items = h.of(int(user)).astype(np.int64)
        seen, target = items[:-1], items[-1]
        head = popular[: k + len(seen)]  # enough to leave k after the seen ones
        fresh = head[~np.isin(head, seen)][:k]
        hits["popularity"] += int(target in fresh)
        after = followers[starts[seen[-1]] : starts[seen[-1] + 1]]
        after = after[~np.isin(after, seen)][:k]
        filled = np.concatenate([after, fresh[~np.isin(fresh, after)]])[:k]
        hits["cooccurrence"] += int(target in filled)
    return {name: n / max(len(users), 1) for name, n in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("users", type=int, nargs="?", default=6040)
    parser.add_argument("items", type=int, nargs="?", default=3706)
    parser.add_argument("--seed", type=int, default=0, help="data.seed")
    args = parser.parse_args()
    source = Sequences(generate(args.users, args.items, args.seed), max_len=1, seed=args.seed)
    every = source.eval_users(args.users)
    for name, recall in baseline_recall(source, every).items():
        print(f"{name}: recall@10 {recall:.4f} over {len(every)} users")


if __name__ == "__main__":
    main()
