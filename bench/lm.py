"""The language model's sequence knobs, measured: padding (static, dynamic, packed) in real
tokens/s, activation checkpointing's peak-memory saving and slowdown at several depths, and tied
against untied embeddings (parameter bytes, quality).

Every config trains in fresh `elastune train` processes, `--repeat` times, interleaved (A B C A B
C ...): its median throughput and its highest measured peak count; ratios are of medians measured
in the same run. The text is the LM's synthetic stream (log-normal lengths, mean 40 tokens in a
128-token context: under half the context, where packing should pay).

    python bench/lm.py                 # all three studies, writes a record (bench/records/)
    python bench/lm.py --repeat 5 --steps 60
    python bench/lm.py --device cuda   # on a GPU, at a GPU's shape (GPU_SHAPE: 512-token context)

Data-loader workers are measured in bench/loader.py.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from embeddings import train
from record import Figure, write_record

# The CPU shape: mean length 40 in a 128-token context. On a GPU so small a model is bound by kernel
# launches, not by the padding or the activations the knobs save, so it runs a wider, longer shape
# with the same ratio of mean length to context (under half, where packing should pay).
CPU_SHAPE = {"heads": 4, "context": 128, "vocab": 4096, "mean_length": 40, "width": 64}
GPU_SHAPE = {"heads": 8, "context": 512, "vocab": 32768, "mean_length": 160, "width": 512}


def _options(shape: dict[str, int], layers: int) -> str:
    return (
        f"workload_options={{layers: {layers}, heads: {shape['heads']}, context: {shape['context']}, "
        f"vocab: {shape['vocab']}, mean_length: {shape['mean_length']}}}"
    )


def base(shape: dict[str, int]) -> list[str]:
    return [
        "workload=lm",
        _options(shape, 2),
        f"model.embedding_dim={shape['width']}",
        "batch.micro=32",
        "optimizer.lr=0.01",
        "eval.samples=1024",
    ]


def studies(shape: dict[str, int]) -> dict[str, list[tuple[str, list[str]]]]:
    return {
        "padding": PADDING,
        "checkpointing": [
            (f"{layers} blocks, {mode}", [_options(shape, layers), f"workload_options.activation_checkpointing={mode}"])
            for layers in (2, 4, 8)
            for mode in ("none", "every_block")
        ],
        "tying": [("untied", []), ("tied", ["workload_options.tie_embeddings=true"])],
    }


PADDING: list[tuple[str, list[str]]] = [
    *((f"padding {p}", [f"workload_options.padding={p}"]) for p in ("static", "dynamic", "packed")),
    # length buckets sort a step's sequences before its micro-batch split: they need accum > 1
    ("padding static, 8 x 4", ["workload_options.padding=static", "batch.micro=8", "batch.accum=4"]),
    ("padding dynamic, 8 x 4", ["workload_options.padding=dynamic", "batch.micro=8", "batch.accum=4"]),
    (
        "padding dynamic + buckets, 8 x 4",
        [
            "workload_options.padding=dynamic",
            "workload_options.bucket_by_length=true",
            "batch.micro=8",
            "batch.accum=4",
        ],
    ),
]


def run(
    configs: list[tuple[str, list[str]]], base: list[str], steps: int, repeat: int, device: str
) -> dict[str, dict[str, Any]]:
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in configs}
    for _ in range(repeat):
        for label, overrides in configs:
            result = train([*base, *overrides], steps, device)
            runs[label].append(result)
    out = {}
    for label, rs in runs.items():
        out[label] = {
            "tokens_per_s": statistics.median(r["units_per_s"] for r in rs),
            "samples_per_s": statistics.median(r["samples_per_s"] for r in rs),
            "peak": max(r["peak_memory_bytes"] for r in rs),
            "perplexity": statistics.median(r["quality"] for r in rs),
            "parameters": rs[0]["config"],
        }
        print(f"{label:28} {out[label]['tokens_per_s']:9,.0f} tokens/s  peak {out[label]['peak'] / 2**20:7.1f} MiB  "
              f"perplexity {out[label]['perplexity']:.1f}", flush=True)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N (at GPU_SHAPE)")
    from record import add_arguments, refuse_dirty

    add_arguments(parser)
    args = parser.parse_args()
    refuse_dirty(args.allow_dirty)
    cuda = args.device.startswith("cuda")
    shape = GPU_SHAPE if cuda else CPU_SHAPE
    lm_base, menu = base(shape), studies(shape)

    pad = run(menu["padding"], lm_base, args.steps, args.repeat, args.device)
    ckpt = run(menu["checkpointing"], lm_base, args.steps, args.repeat, args.device)
    tie = run(menu["tying"], lm_base, args.steps, args.repeat, args.device)

    static = pad["padding static"]["tokens_per_s"]
    static84 = pad["padding static, 8 x 4"]["tokens_per_s"]
    bucketed = pad["padding dynamic + buckets, 8 x 4"]["tokens_per_s"]
    unbucketed = pad["padding dynamic, 8 x 4"]["tokens_per_s"]
    figures = [
        Figure("dynamic vs static padding, real tokens/s", round(pad["padding dynamic"]["tokens_per_s"] / static, 2),
               "x", ">= 1.5", pad["padding dynamic"]["tokens_per_s"] / static >= 1.5, "same run"),
        Figure("packed vs static padding, real tokens/s", round(pad["padding packed"]["tokens_per_s"] / static, 2),
               "x", ">= 1.5", pad["padding packed"]["tokens_per_s"] / static >= 1.5, "same run"),
        Figure("dynamic + length buckets vs static padding at 8 x 4, real tokens/s", round(bucketed / static84, 2),
               "x", ">= 1.5", bucketed / static84 >= 1.5,
               f"same run; dynamic without buckets at 8 x 4: {unbucketed / static84:.2f}x"),
    ]  # fmt: skip
    rows = [[label, round(r["tokens_per_s"]), round(r["peak"] / 2**20, 1), round(r["perplexity"], 1)]
            for study in (pad, ckpt, tie) for label, r in study.items()]  # fmt: skip
    for layers in (2, 4, 8):
        none, every = ckpt[f"{layers} blocks, none"], ckpt[f"{layers} blocks, every_block"]
        figures.append(
            Figure(
                f"checkpointing every block, {layers} blocks: peak saved / slowdown",
                f"{1 - every['peak'] / none['peak']:.1%} / {none['tokens_per_s'] / every['tokens_per_s']:.2f}x",
                note="peak: max of the runs; slowdown: median tokens/s, same run",
            )
        )
    from elastune.validate import load_run_config
    from elastune.workloads import build_workload

    params = {}
    for label, sets in menu["tying"]:
        model = build_workload(load_run_config(None, [*lm_base, *sets, "device=cpu"])).build_model()
        params[label] = sum(p.numel() * p.element_size() for p in model.parameters())
    figures.append(
        Figure(
            "tied vs untied: parameter bytes / perplexity",
            f"{params['tied'] / params['untied']:.2f}x / {tie['tied']['perplexity']:.1f} vs "
            f"{tie['untied']['perplexity']:.1f}",
            note=f"{params['untied'] - params['tied']:,} bytes saved "
            f"(the {shape['vocab']} x {shape['width']} output projection)",
        )
    )
    write_record(
        "lm-cuda" if cuda else "lm-cpu",
        "Language model: padding, activation checkpointing, tied embeddings" + (" (GPU)" if cuda else ""),
        figures,
        device=args.device,
        settings={"base": lm_base, "steps": args.steps, "repeat": args.repeat, "measured": "median tokens/s, max peak"},
        notes=[
            "dynamic padding pads to the micro-batch's longest sequence; with log-normal lengths (sigma 0.8) "
            "that is usually near the context, so without length buckets it gains little",
            *(["peak: the CUDA caching allocator's reserved peak"] if cuda else []),
            "data-loader workers: bench/loader.py",
        ],
        table={"columns": ["config", "real tokens/s", "peak MiB", "perplexity"], "rows": rows},
    )


if __name__ == "__main__":
    main()
