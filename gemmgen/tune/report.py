"""Reports on a tuning entry: the candidate table, why the winner won, and a plot of the search."""
from __future__ import annotations

from pathlib import Path

from .results import row_baseline, save_figure

MODEL_FIELDS = (("blocks_per_sm", "blocks/SM"), ("resident_warps", "resident warps"),
                ("registers", "registers"), ("waves", "waves"), ("tail_efficiency", "tail eff"),
                ("flops_per_byte_global", "FLOP/B global"),
                ("flops_per_byte_shared", "FLOP/B shared"), ("score", "model score"))


def _ok(entry: dict) -> list[tuple[str, dict]]:
    rows = [(n, r) for n, r in entry["candidates"].items() if r.get("status") == "ok"]
    return sorted(rows, key=lambda item: -item[1]["tflops"])


def _winner(entry: dict) -> str:
    """The winner's name, or that gemm's default stands (no candidate beat it by the margin)."""
    if entry.get("default_stands"):
        return (f"none: the default stands ({entry.get('default_tflops')} TFLOP/s, no candidate "
                f"{entry.get('margin', 1.03):.2f}x faster)")
    return str(entry.get("winner"))


def show(entry: dict, limit: int = 20) -> str:
    """Measured candidates, fastest first, then every failure with its reason."""
    cub, name = row_baseline(entry), entry.get("baseline") or "cuBLAS"
    lines = [f"{entry['gpu']}  {entry['dtype']}  {entry['M']}x{entry['N']}x{entry['K']}  "
             f"winner: {_winner(entry)}  {name}: {cub if cub else '-'} TFLOP/s"]
    for name, r in _ok(entry)[:limit]:
        pct = f"{100 * r['tflops'] / cub:6.1f}%" if cub else "     -"
        lines.append(f"  {r['tflops']:8.2f} TFLOP/s {pct}  regs {r.get('registers', '-'):>3}  "
                     f"err {r['rel_error']:.1e}  {name}"
                     + ("  (default)" if name == entry.get("default") else ""))
    failed = [(n, r) for n, r in entry["candidates"].items() if r.get("status") != "ok"]
    for name, r in failed:
        lines.append(f"  {r['status']:>13}  {name}: {r.get('reason', '')}")
    counts = {}
    for r in entry["candidates"].values():
        counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
    lines.append("  " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return "\n".join(lines)


def explain(entry: dict) -> str:
    """Why the winner won: its measured time and model figures beside the runner-up's."""
    ok = _ok(entry)
    if not ok:
        return "no candidate passed verification and timing"
    (wn, w), rest = ok[0], ok[1:]
    lines = [f"winner    {wn}: {w['tflops']:.2f} TFLOP/s"]
    if not rest:
        return "\n".join(lines + ["(no runner-up measured)"])
    rn, r = rest[0]
    lines.append(f"runner-up {rn}: {r['tflops']:.2f} TFLOP/s "
                 f"({100 * (w['tflops'] / r['tflops'] - 1):.1f}% slower)")
    lines.append(f"  {'':<16} {'winner':>10} {'runner-up':>10}")
    for key_, label in MODEL_FIELDS:
        lines.append(f"  {label:<16} {w['model'].get(key_, '-')!s:>10} {r['model'].get(key_, '-')!s:>10}")
    reasons = []
    wm, rm = w["model"], r["model"]
    if wm["blocks_per_sm"] != rm["blocks_per_sm"]:
        reasons.append(f"{wm['blocks_per_sm']} vs {rm['blocks_per_sm']} resident blocks per SM "
                       f"({wm['resident_warps']} vs {rm['resident_warps']} warps to hide latency)")
    if abs(wm["tail_efficiency"] - rm["tail_efficiency"]) > 0.02:
        reasons.append(f"last wave {wm['tail_efficiency']:.0%} vs {rm['tail_efficiency']:.0%} full "
                       f"({wm['waves']} vs {rm['waves']} waves)")
    for lvl in ("global", "shared"):
        a, b = wm[f"flops_per_byte_{lvl}"], rm[f"flops_per_byte_{lvl}"]
        if abs(a - b) > 0.05 * max(a, b):
            reasons.append(f"{lvl} intensity {a} vs {b} FLOP/byte")
    wc, rc = w.get("config", {}), r.get("config", {})
    fields = [f"{f} {wc[f]} vs {rc.get(f)}" for f in wc if f != "family" and wc[f] != rc.get(f)]
    lines.append("config: " + (", ".join(fields) or "identical"))
    lines.append("model: " + ("; ".join(reasons) if reasons else
                 "no difference in occupancy, waves or intensity; the configs differ only in "
                 "code paths (stages, skew, warp shape, fragments) that the measurement separates"))
    return "\n".join(lines)


def plot(entry: dict, path: str | Path) -> Path:
    """TFLOP/s of every verified candidate in model-rank order; winner and the baseline
    (F.linear, torch.matmul or cuBLAS) marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [(n, r) for n, r in entry["candidates"].items() if r.get("status") == "ok"]
    rows.sort(key=lambda item: -item[1]["model"]["score"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.scatter(range(len(rows)), [r["tflops"] for _, r in rows], s=14, label="candidates")
    win = [i for i, (n, _) in enumerate(rows) if n == entry.get("winner")]
    if win:
        ax.scatter(win, [rows[win[0]][1]["tflops"]], marker="*", s=220, c="red", label="winner")
    if row_baseline(entry):
        ax.axhline(row_baseline(entry), color="k", ls="--",
                   label=entry.get("baseline") or "cuBLAS")
    ax.set_xlabel("candidate, in the cheap model's order (best predicted first)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"gemmgen tune {entry['dtype']} {entry['M']}x{entry['N']}x{entry['K']}, "
                 f"{entry['gpu']}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_figure(fig, path)
