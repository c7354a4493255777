"""``vlrl plot RUN_DIR``: PNG plots of a run from its ``metrics.jsonl``, and its episode pictures;
``vlrl plot RUN_A RUN_B ...``: their held-out curves side by side (``plot_comparison``).

Writes into ``RUN_DIR/plots``:

- ``reward.png``: mean episode reward of the rollouts of each RL step, per source;
- ``pass_rate.png``: training pass rate per step, and held-out success at each evaluation, with
  the warm-start checkpoint's and the baselines (random clicks, best constant point, oracle) marked;
- ``episode_length.png``: turns and generated tokens per episode;
- ``entropy.png``: the policy's mean token entropy on the trained tokens (and the warm start's loss);
- ``throughput.png``: trained tokens/s, generated tokens/s and seconds per step;
- ``overview.png``: all of the above on one page;
- ``episodes.png``: the annotated evaluation episodes (first and last evaluation side by side).

Runs are read back from disk only, so plotting works on a finished, interrupted or running run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vlrl.job.metrics_log import read_metrics

PLOTS_DIR = "plots"
EPISODES_DIR = "episodes"


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write every plot of ``run_dir``; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    if not records:
        raise FileNotFoundError(f"{run_dir}: no metrics.jsonl records to plot (is it a run folder?)")
    out = run_dir / PLOTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    series = _Series(records)
    panels: list[tuple[str, Callable[[Any], None]]] = [
        ("reward", series.reward),
        ("pass_rate", series.pass_rate),
        ("episode_length", series.episode_length),
        ("entropy", series.entropy),
        ("throughput", series.throughput),
    ]
    written = []
    for name, draw in panels:
        fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
        draw(ax)
        fig.tight_layout()
        fig.savefig(out / f"{name}.png")
        plt.close(fig)
        written.append(out / f"{name}.png")
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), dpi=90)
    for ax, (_, draw) in zip(axes.flat, panels):
        draw(ax)
    axes.flat[-1].axis("off")
    axes.flat[-1].text(0.0, 0.5, series.caption(), fontsize=10, va="center", family="monospace")
    fig.tight_layout()
    fig.savefig(out / "overview.png")
    plt.close(fig)
    written.append(out / "overview.png")
    sheet = episode_sheet(run_dir)
    if sheet is not None:
        written.append(sheet)
    return written


def plot_comparison(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Write ``out``: the held-out success (from the warm start's, at step 0) and the training pass
    rate of each run over its RL steps, one colour a run; for runs that differ in one setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (held_out, training) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100)
    for run_dir in map(Path, run_dirs):
        records = read_metrics(run_dir)
        if not records:
            raise FileNotFoundError(f"{run_dir}: no metrics.jsonl records to plot (is it a run folder?)")
        series = _Series(records)
        evals = [r for r in series.evals if r.get("tag") != "base"]
        x, y = series._xy(evals, "eval/success")
        label = f"{run_dir.name} ({y[-1]:.2f})" if y else run_dir.name
        (line,) = held_out.plot(x, y, marker="o", linewidth=2, label=label)
        series._line(training, series.rl, "rollout/pass_rate", run_dir.name, color=line.get_color(), alpha=0.8)
    held_out.set(title="held-out success (last in brackets)", xlabel="RL step", ylabel="success rate", ylim=(-0.02, 1.02))
    training.set(title="training pass rate (T=1)", xlabel="RL step", ylabel="pass rate", ylim=(-0.02, 1.02))
    _legend(held_out)
    _legend(training)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def episode_sheet(run_dir: Path) -> Path | None:
    """The annotated episode pictures of ``RUN_DIR/episodes`` in one PNG: a row per evaluation tag."""
    from PIL import Image, ImageDraw

    pictures = sorted((run_dir / EPISODES_DIR).glob("*.png")) if (run_dir / EPISODES_DIR).exists() else []
    if not pictures:
        return None
    rows: dict[str, list[Path]] = defaultdict(list)
    for path in pictures:
        rows[path.name.split("-", 1)[0]].append(path)
    order = sorted(rows, key=_tag_order)
    images = {tag: [Image.open(p).convert("RGB") for p in rows[tag][:6]] for tag in order}
    width = max(sum(i.width + 6 for i in row) for row in images.values()) + 90
    height = sum(max(i.height for i in row) + 6 for row in images.values()) + 6
    sheet = Image.new("RGB", (width, height), (240, 240, 240))
    draw = ImageDraw.Draw(sheet)
    y = 6
    for tag in order:
        draw.text((6, y + 4), tag, fill=(0, 0, 0))
        x = 90
        for image in images[tag]:
            sheet.paste(image, (x, y))
            x += image.width + 6
        y += max(i.height for i in images[tag]) + 6
    path = run_dir / PLOTS_DIR / "episodes.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)
    return path


def _tag_order(tag: str) -> tuple[int, int]:
    names = {"base": 0, "warm": 1}
    if tag in names:
        return (names[tag], 0)
    digits = "".join(c for c in tag if c.isdigit())
    return (2, int(digits) if digits else 0)


class _Series:
    """The run's records as x/y series for each plot."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.rl = [r for r in records if r.get("phase") == "rl"]
        self.evals = [r for r in records if r.get("phase") == "eval"]
        self.sft = [r for r in records if r.get("phase") == "warm-start"]
        summaries = [r for r in records if r.get("phase") == "summary"]
        self.summary = summaries[-1] if summaries else {}
        chances = [r for r in records if "eval/chance" in r]
        self.baselines = {kind: chances[-1].get(f"eval/{kind}") for kind in ("chance", "constant", "oracle")} if chances else {}
        self.sources = sorted({k.split("/")[1] for r in self.rl for k in r if k.startswith("rollout/") and k.count("/") == 2})

    def _xy(self, rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
        pairs = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def _line(self, ax: Any, rows: list[dict[str, Any]], key: str, label: str, **style: Any) -> None:
        x, y = self._xy(rows, key)
        if x:
            ax.plot(x, y, label=label, **style)

    def reward(self, ax: Any) -> None:
        self._line(ax, self.rl, "rollout/reward", "all sources", color="black", linewidth=2)
        for name in self.sources if len(self.sources) > 1 else []:
            self._line(ax, self.rl, f"rollout/{name}/reward", name, alpha=0.7)
        ax.set(title="mean episode reward (RL rollouts)", xlabel="RL step", ylabel="reward")
        _legend(ax)

    def pass_rate(self, ax: Any) -> None:
        self._line(ax, self.rl, "rollout/pass_rate", "training rollouts (T=1)", color="tab:blue", alpha=0.6)
        rl_evals = [r for r in self.evals if r.get("tag") != "base"]  # from the warm start's, at step 0
        self._line(ax, rl_evals, "eval/success", "held-out success", color="tab:red", marker="o", linewidth=2)
        for name in self.sources if len(self.sources) > 1 else []:
            self._line(ax, rl_evals, f"eval/{name}/success", f"held-out {name}", linestyle="--", marker=".")
        for tag, colour in (("base", "grey"), ("warm", "tab:green")):
            hits = [r for r in self.evals if r.get("tag") == tag]
            if hits:
                ax.axhline(hits[-1]["eval/success"], color=colour, linestyle=":", label=f"{tag} checkpoint {hits[-1]['eval/success']:.2f}")
        for kind, label, style in (
            ("chance", "chance (random clicks)", "--"),
            ("constant", "best constant point", "-."),
            ("oracle", "oracle", (0, (1, 3))),
        ):
            if self.baselines.get(kind) is not None:
                value = self.baselines[kind]
                ax.axhline(value, color="black", linestyle=style, linewidth=0.8, label=f"{label} {value:.2f}")
        ax.set(title="pass rate", xlabel="RL step", ylabel="success rate", ylim=(-0.02, 1.02))
        _legend(ax)

    def episode_length(self, ax: Any) -> None:
        self._line(ax, self.rl, "rollout/turns", "turns per episode", color="tab:purple")
        ax.set(title="episode length", xlabel="RL step", ylabel="turns")
        twin = ax.twinx()
        self._line(twin, self.rl, "rollout/response_tokens", "generated tokens per episode", color="tab:orange")
        twin.set_ylabel("generated tokens")
        _legend(ax, twin)

    def entropy(self, ax: Any) -> None:
        self._line(ax, self.rl, "train/entropy", "RL: token entropy", color="tab:blue")
        ax.set(title="policy entropy (trained tokens)", xlabel="RL step", ylabel="nats")
        if self.sft:
            twin = ax.twiny()  # shares the y axis: a log scale shows both (SFT starts near ln V)
            self._line(twin, self.sft, "train/loss", "warm start: SFT loss", color="tab:green", alpha=0.6)
            twin.set_xlabel("warm-start step")
            ax.set_yscale("log")
            _legend(ax, twin)
        else:
            _legend(ax)

    def throughput(self, ax: Any) -> None:
        self._line(ax, self.rl, "train/tokens_per_s", "trained tokens/s", color="tab:blue")
        self._line(ax, self.rl, "rollout/tokens_per_s", "generated tokens/s", color="tab:orange")
        ax.set(title="throughput", xlabel="RL step", ylabel="tokens/s")
        twin = ax.twinx()
        self._line(twin, self.rl, "time/step_s", "seconds per step", color="grey", linestyle=":")
        twin.set_ylabel("s / step")
        _legend(ax, twin)

    def caption(self) -> str:
        s = self.summary
        if not s:
            return "(run not finished: no summary yet)"
        keys = ("success_chance", "success_constant", "success_oracle", "success_first", "success_warm_start", "success_last", "steps", "wall_s")
        return "\n".join(f"{k:<20} {s[k]:.3f}" if isinstance(s.get(k), float) else f"{k:<20} {s.get(k)}" for k in keys)


def _legend(*axes: Any) -> None:
    handles, labels = [], []
    for ax in axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        axes[0].legend(handles, labels, fontsize=8, loc="best")
