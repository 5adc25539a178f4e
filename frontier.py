"""Mapping the boundary: how much associative recall each kind of recurrent state buys per byte.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) promises a map of the boundary between
structure and content and draws one point: three fixed decays (192 numbers per layer at width
64) against readers that keep everything. This script draws the map on the field's axes
(Zoology, Arora et al. 2023; Based, Arora et al. 2024): MQAR accuracy per query against the bytes
of recurrent state one layer holds at the test length, log x-axis, one curve per family, every
point trained under recall.py's one recipe (recall.train_and_test) on recall.py's task. It asks
what buys recall: more decays (the additive EMA write at S = 3 .. 24), or a different write (the
same fixed decays writing key-value outer products, ema_kv; the delta rule, delta).

Families (the models live in spen.py, variants.py and gpt.py)
    linear, softmax_state   SPEN: the additive EMA state read by the paper's linear map or by
                            softmax over its S slots; S in --decays, at each of --widths   S C
    selective               SPEN linear with input-dependent decays (still an additive write)  S C
    ema_kv                  SPEN: the 3 paper decays writing k v^T per head, D in --head_widths  S C + S C D
    delta                   SPEN: the delta rule, learned write strength, D in --head_widths   S C + C D
    linear_attn_history     SPEN: bounded linear attention over every past trace slot     S C + C D + C
    swa                     GPT with sliding-window attention, w in --windows (w <= T)    2 (w - 1) C
    gpt, softmax_history    the unbounded references at the test length T            2 T C, S C + 2 T S C
Decays are spread by ema.spread_decays: geometric from the paper's fastest (0.5) to its slowest
(0.02), so S = 3 is the paper's own set and a larger S fills the same range more densely.

State bytes (`state_bytes`, the one count): fp32 bytes per layer that step() holds after the
test length T, 4 x model.state_floats(T) (Zoology's convention: recurrent state per layer in
fp32). Every SPEN family counts its S C traces; the history readers add their caches or sums; a
sliding window counts the w - 1 keys and values a later query can still see (Zoology writes
2 w d: the current token's own key and value are computed, not held). Nothing else is counted
(weights, the FFN's activations, the embedding of the current token).

Settings (recall.py's generator and recipe; BUDGETS sets the steps, --steps overrides it)
    near    recall.py's default task and budget: T = 24, N in 2, 4, 8, 8 keys, 64 values, 1,500
            steps (so the point linear_C64_S3 is recall.py's `linear` run)
    press   a task that presses the bounded states: T = 64, N in 2, 4, 8, 16, 16 keys, 64 values,
            1,000 steps (the curriculum 300, the final decay 100) to fit the grid in hours. N = 2
            is there for the curriculum, as in recall.py: starting at N = 4, GPT stayed at 1/N
            for 3,000 steps at lr 1e-3 (results/frontier/README.md)
Each point reports, per pair count N, the test accuracy per query and the binding score
(acc - 1/N) / (1 - 1/N), mean and spread over --seeds.

Run
    python frontier.py                                # the grid: every family, both settings, 2 seeds
    python frontier.py --quick                        # a handful of points in a few minutes
    python frontier.py --out_dir results/frontier     # refresh the committed reference
    python frontier.py --out_dir results/frontier --report   # the table and figure of the runs saved so far
Two single-threaded runs train at a time (--workers). Every finished run is saved at once as
OUT/runs/SETTING/POINT_sSEED.json with its whole config beside its numbers; a rerun with the
same config reuses it, so a killed grid continues where it stopped. Then frontier.json,
frontier.md and frontier.png. The reference grid, its figure, the argument beside it and the
time it took are in results/frontier/README.md.
"""

import dataclasses
import json
import os
import time
from dataclasses import dataclass

import torch

import ema
import recall
from gpt import GPT, GPTConfig
from plumbing import checkpoint, cli, runs
from spen import SPEN, SPENConfig

SETTINGS = {"near": dict(block_size=24, pairs=(2, 4, 8), n_keys=8, n_values=64),
            "press": dict(block_size=64, pairs=(2, 4, 8, 16), n_keys=16, n_values=64)}
BUDGETS = {"near": dict(steps=1500, curriculum=500, decay=150),  # recall.py's own: its runs are this grid's points
           "press": dict(steps=1000, curriculum=300, decay=100)}  # fewer steps at 2.7x the tokens per step
SPEN_FAMILIES = {  # family -> SPENConfig overrides
    "linear": dict(predictor="linear"), "softmax_state": dict(predictor="softmax_attn"),
    "selective": dict(predictor="linear", context="selective"), "ema_kv": dict(predictor="ema_kv"),
    "delta": dict(predictor="delta"), "linear_attn_history": dict(predictor="linear_attn", reads="history"),
    "softmax_history": dict(predictor="softmax_attn", reads="history")}
FAMILIES = tuple(SPEN_FAMILIES) + ("swa", "gpt")
ADDITIVE = ("linear", "softmax_state", "selective")  # the EMA of the inputs: a write h += a (x - h)
HEADED = ("ema_kv", "delta", "linear_attn_history")  # a state per head of width D
QUICK = [("linear", dict(S=3, C=64)), ("softmax_state", dict(S=12, C=64)), ("ema_kv", dict(D=32)),
         ("delta", dict(D=32)), ("swa", dict(w=8)), ("gpt", {})]
QUICK_BUDGET = dict(quick=True, settings=("near",), windows=(), seeds=1, steps=400, curriculum=150, decay=50)


@dataclass
class FrontierConfig:
    out_dir: str = cli.arg("out/frontier", "folder for frontier.json/md/png and runs/ (one JSON per finished run)",
                           group="I/O")
    families: tuple = cli.arg(FAMILIES, "families to train, any of " + " ".join(FAMILIES), group="grid")
    settings: tuple = cli.arg(tuple(SETTINGS), "tasks, any of " + " ".join(SETTINGS), group="grid")
    decays: tuple = cli.arg((3, 6, 12, 24), "S, numbers of decays of the additive families", group="grid")
    widths: tuple = cli.arg((32, 64), "C, widths of linear and softmax_state", group="grid")
    width: int = cli.arg(64, "C of every other family", group="grid")
    selective_decays: tuple = cli.arg((3, 12), "S of the selective family (at --width)", group="grid")
    head_widths: tuple = cli.arg((1, 4, 16), "D, head widths of ema_kv, delta, linear_attn_history (D divides "
                                 "--width)", group="grid")
    windows: tuple = cli.arg((4, 8, 16, 32, 64), "w, sliding windows of swa; each setting uses those <= its T",
                             group="grid")
    seeds: int = cli.arg(2, "seeds per point (model init and training data)", group="grid")
    steps: int = cli.arg(None, "optimizer steps per run; None: the setting's budget (BUDGETS)", group="recipe")
    curriculum: int = cli.arg(None, "first steps on the smallest pair count; None: the setting's", group="recipe")
    decay: int = cli.arg(None, "final steps of linear lr decay; None: the setting's", group="recipe")
    quick: bool = cli.arg(False, "a handful of points: " + ", ".join(f for f, _ in QUICK) + "; the near task, "
                          "1 seed, 400 steps (minutes, not hours)", group="grid")
    report: bool = cli.arg(False, "train nothing: the table and figure of the runs saved so far (a grid still "
                           "running, or a killed one)", group="grid")
    workers: int = cli.arg(2, "runs trained at a time, one thread each", group="system")

    def __post_init__(self):
        for name in ("families", "settings", "decays", "widths", "selective_decays", "head_widths", "windows"):
            setattr(self, name, tuple(getattr(self, name)))
        bad = [f for f in self.families if f not in FAMILIES]
        cli.require(self.families and not bad, "--families must be names from {}, got {}", " ".join(FAMILIES), bad)
        bad = [s for s in self.settings if s not in SETTINGS]
        cli.require(self.settings and not bad, "--settings must be names from {}, got {}", " ".join(SETTINGS), bad)
        for name in ("decays", "widths", "selective_decays", "head_widths", "windows"):
            cli.require(all(isinstance(v, int) and v >= 1 for v in getattr(self, name)),
                        "--{} must be integers >= 1, got {}", name, " ".join(map(str, getattr(self, name))))
        bad = [D for D in self.head_widths if self.width % D]
        cli.require(not bad, "--head_widths {} do not divide --width {}: a head width D needs width / D heads",
                    " ".join(map(str, bad)), self.width)
        cli.require(all(C % 2 == 0 for C in self.widths) and self.width % 2 == 0,
                    "--widths and --width must be even (softmax_state, swa and gpt use 2 heads)")
        longest = max(SETTINGS[s]["block_size"] for s in self.settings)
        too_long = [w for w in self.windows if w > longest]
        cli.require(not too_long, "--windows {} is longer than every sequence (T <= {}): a window of T is full "
                    "attention (the gpt point)", " ".join(map(str, too_long)), longest)
        for name in ("seeds", "workers", "width"):
            cli.require(getattr(self, name) >= 1, "--{} must be >= 1, got {}", name, getattr(self, name))
        for setting in self.settings:
            b = budget_of(self, setting)
            cli.require(b["steps"] >= 1, "--steps must be >= 1, got {}", b["steps"])
            cli.require(0 <= b["curriculum"] <= b["steps"] and 0 <= b["decay"] <= b["steps"],
                        "--curriculum and --decay must be in [0, --steps], got {} and {}", b["curriculum"], b["decay"])


def budget_of(cfg, setting):
    """steps, curriculum and decay of one setting: its BUDGETS entry under the flags given."""
    return {k: getattr(cfg, k) if getattr(cfg, k) is not None else v for k, v in BUDGETS[setting].items()}


def points(cfg, setting):
    """[(family, knobs)] of the grid for one setting, knobs a dict of S, C, D, w as they apply."""
    if cfg.quick:
        return [(f, k) for f, k in QUICK if f in cfg.families]
    T, out = SETTINGS[setting]["block_size"], []
    for family in cfg.families:
        if family in ("linear", "softmax_state"):
            out += [(family, dict(S=S, C=C)) for C in cfg.widths for S in cfg.decays]
        elif family == "selective":
            out += [(family, dict(S=S, C=cfg.width)) for S in cfg.selective_decays]
        elif family in HEADED:
            out += [(family, dict(D=D)) for D in cfg.head_widths]
        elif family == "swa":
            out += [(family, dict(w=w)) for w in cfg.windows if w <= T]
        else:
            out.append((family, {}))
    return out


def label(family, knobs):
    """A point's name: family, then its knobs (linear_S6_C32, ema_kv_D16, swa_w8, gpt)."""
    return "_".join([family] + [f"{k}{v}" for k, v in sorted(knobs.items())])


def build_model(cfg, setting, family, knobs):
    """The point's model: 2 layers (recall.py's depth), vocabulary K + M + 1."""
    task = SETTINGS[setting]
    V, T, C = task["n_keys"] + task["n_values"] + 1, task["block_size"], knobs.get("C", cfg.width)
    if family in ("swa", "gpt"):
        return GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=2, n_head=2, n_embd=C, window=knobs.get("w")))
    return SPEN(SPENConfig(vocab_size=V, block_size=T, n_layer=2, n_embd=C, n_head=C // knobs.get("D", C // 2),
                           alphas=ema.spread_decays(knobs.get("S", 3)), **SPEN_FAMILIES[family]))


def state_bytes(model, T):
    """fp32 bytes of recurrent state per layer after T tokens: 4 x the numbers step() holds."""
    return 4 * model.state_floats(T)


def recall_config(cfg, setting, knobs):
    """recall.py's config for this point: its task, recall.py's recipe, the frontier's budget."""
    C = knobs.get("C", cfg.width)
    return recall.RecallConfig(**SETTINGS[setting], **budget_of(cfg, setting), n_embd=C, n_head=2, workers=1)


def run_point(job):
    """Train and test one (setting, family, knobs, seed) under recall.py's recipe."""
    cfg, setting, family, knobs, seed = job
    rcfg = recall_config(cfg, setting, knobs)
    torch.manual_seed(seed)
    model = build_model(cfg, setting, family, knobs)
    res = recall.train_and_test(rcfg, model, seed)
    return dict(res, setting=setting, family=family, knobs=knobs, point=label(family, knobs),
                state_floats=model.state_floats(rcfg.block_size), state_bytes=state_bytes(model, rcfg.block_size))


def run_key(cfg, setting, family, knobs):
    """Everything a run's numbers depend on: a saved run is reused only under the same key."""
    rcfg = dataclasses.asdict(recall_config(cfg, setting, knobs))
    return json.loads(json.dumps(dict(recall={k: v for k, v in rcfg.items() if k not in ("out_dir", "variants",
                                                                                         "seeds", "workers")},
                                      family=family, knobs=knobs,
                                      model=dataclasses.asdict(build_model(cfg, setting, family, knobs).config))))


def run_grid(cfg):
    """Every (setting, point, seed) of the grid, seed-major so a partial grid has whole seeds;
    each finished run saved at once, a saved run with the same key reused (a killed grid
    continues). One progress line per run with an ETA."""
    results, todo = [], []
    for seed in range(cfg.seeds):
        for setting in cfg.settings:
            for family, knobs in points(cfg, setting):
                path = os.path.join(cfg.out_dir, "runs", setting, f"{label(family, knobs)}_s{seed}.json")
                key = run_key(cfg, setting, family, knobs)
                saved = None
                if os.path.exists(path):
                    with open(path) as f:
                        saved = json.load(f)
                if saved and saved["config"] == key:
                    results.append(saved)
                else:
                    todo.append(((cfg, setting, family, knobs, seed), path, key))
    print(f"frontier: {len(results) + len(todo)} runs, {len(results)} already saved, {len(todo)} to train "
          f"({cfg.workers} at a time)" + (": --report trains none of them" if cfg.report else ""), flush=True)
    if cfg.report:
        return results
    t0, where = time.time(), {(job[1], label(*job[2:4]), job[4]): (path, key) for job, path, key in todo}
    for done, (job, r) in enumerate(runs.run_jobs(run_point, [job for job, _, _ in todo], cfg.workers), 1):
        path, key = where[job[1], label(*job[2:4]), job[4]]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        r = dict(r, config=key)
        checkpoint.atomic_json(r, path)
        results.append(r)
        el = time.time() - t0
        accs = " ".join(f"{N}:{a:.2f}" for N, a in r["test"]["acc"].items())
        print(f"[{done}/{len(todo)}] {r['setting']:5s} {r['point']:<26s} seed {r['seed']} acc {accs} | "
              f"{r['state_bytes']:,} B | {r['seconds']:.0f} s | ETA {el / done * (len(todo) - done) / 60:.0f} min",
              flush=True)
    return results


ROUNDOFF = {"fp32": 2.0 ** -24, "bf16": 2.0 ** -8}  # unit roundoff of the state's dtype


def capacity_table(cfg):
    """The argument's steps 1 and 2 for the grid's decays at each setting's T: the condition
    number of the trace map V (ema.trace_map; its exact rank is min(S, T)), its numerical rank
    in each dtype (singular values above the unit roundoff times the largest), and
    ema.memory_capacity of one channel's S-trace state in each dtype
    -> {S: {setting: {cond, rank_fp32, rank_bf16, fp32, bf16}}}."""
    table = {}
    for S in sorted(set(cfg.decays) | {3}):
        table[str(S)] = {}
        for setting in cfg.settings:
            alphas, T = ema.spread_decays(S), SETTINGS[setting]["block_size"]
            sv = torch.linalg.svdvals(ema.trace_map(alphas, T))
            row = dict(cond=float(sv[0] / sv[-1]))
            for d, eps in ROUNDOFF.items():
                row[f"rank_{d}"] = int((sv > eps * sv[0]).sum())
                row[d] = round(ema.memory_capacity(alphas, T, eps), 2)
            table[str(S)][setting] = row
    return table


def summarize(cfg, results, seconds):
    """frontier.json: per setting and point, mean and std over seeds of accuracy and binding at
    every pair count, the state bytes, the family and knobs, and every run's config."""
    out = dict(command=cli.command_line("frontier.py", cfg), settings=dataclasses.asdict(cfg), tasks=SETTINGS,
               budgets={s: budget_of(cfg, s) for s in cfg.settings}, capacity=capacity_table(cfg),
               seconds=round(seconds, 1), run_seconds=round(sum(r["seconds"] for r in results), 1), points={})
    for setting in cfg.settings:
        out["points"][setting] = {}
        for family, knobs in points(cfg, setting):
            name = label(family, knobs)
            rs = sorted((r for r in results if r["setting"] == setting and r["point"] == name), key=lambda r: r["seed"])
            if not rs:
                continue
            acc = {N: runs.mean_std([r["test"]["acc"][N] for r in rs]) for N in rs[0]["test"]["acc"]}
            out["points"][setting][name] = dict(
                family=family, knobs=knobs, state_bytes=rs[0]["state_bytes"], params=rs[0]["params"],
                acc={N: m for N, (m, s) in acc.items()}, acc_std={N: s for N, (m, s) in acc.items()},
                binding={N: recall.binding(m, int(N)) for N, (m, s) in acc.items()},
                acc_per_seed={N: [r["test"]["acc"][N] for r in rs] for N in acc}, seeds=len(rs),
                seconds=[round(r["seconds"], 1) for r in rs])
    return out


RECALLS = 0.9  # the accuracy at the largest N that counts as recalling (the knee of a family's curve)


def family_summary(pts, N):
    """[(family, best point, smallest-state point with acc >= RECALLS or None)] at pair count N."""
    out = []
    for family in FAMILIES:
        ps = sorted((p for p in pts.values() if p["family"] == family), key=lambda p: p["state_bytes"])
        if ps:
            out.append((family, max(ps, key=lambda p: p["acc"][N]), next((p for p in ps if p["acc"][N] >= RECALLS),
                                                                          None)))
    return out


def write_md(res, path):
    lines = [f"# The frontier: MQAR accuracy against state bytes per layer", "", f"`{res['command']}`", "",
             f"Wall {res['seconds']:.0f} s for this invocation; the runs' own times sum to {res['run_seconds']:.0f} s. "
             "Accuracy per query on the test sequences (mean ± std over seeds), binding = (acc - 1/N) / (1 - 1/N).",
             ""]
    for setting, pts in res["points"].items():
        pairs = list(res["tasks"][setting]["pairs"])
        task, b = res["tasks"][setting], res["budgets"][setting]
        lines += [f"## {setting}: T = {task['block_size']}, {task['n_keys']} keys, {task['n_values']} values; "
                  f"{b['steps']} steps (curriculum {b['curriculum']}, final decay {b['decay']})", "",
                  "| point | family | state bytes / layer | seeds | " + " | ".join(f"acc N={N}" for N in pairs) + " | "
                  + " | ".join(f"binding N={N}" for N in pairs) + " |", "|---" * (4 + 2 * len(pairs)) + "|"]
        for name, p in sorted(pts.items(), key=lambda kv: (FAMILIES.index(kv[1]["family"]), kv[1]["state_bytes"])):
            lines.append(f"| {name} | {p['family']} | {p['state_bytes']:,} | {p['seeds']} | "
                         + " | ".join(f"{p['acc'][str(N)]:.3f} ± {p['acc_std'][str(N)]:.3f}" for N in pairs) + " | "
                         + " | ".join(f"{p['binding'][str(N)]:+.3f}" for N in pairs) + " |")
        N = str(pairs[-1])
        lines += ["", f"Per family at N = {N}: the best point, and the fewest bytes that answer >= {RECALLS} "
                  "(the curve's knee; '-' = none in the grid).", "",
                  f"| family | best accuracy (at bytes) | fewest bytes with accuracy >= {RECALLS} |", "|---|---|---|"]
        for family, best, knee in family_summary(pts, N):
            lines.append(f"| {family} | {best['acc'][N]:.3f} ({best['state_bytes']:,}) | "
                         + (f"{knee['state_bytes']:,} ({knee['acc'][N]:.3f})" if knee else "-") + " |")
        lines.append("")
    sets = list(res["points"])
    lines += ["## What S fixed decays can hold (ema.trace_map, ema.memory_capacity)", "",
              "One channel's state of S decays (ema.spread_decays) after T inputs is V x with V the S x T trace "
              "map: its condition number (float64; above ~1e16 only a lower bound), its numerical rank (singular "
              "values above the dtype's unit roundoff times the largest), and the linear memory capacity, in past "
              "inputs recoverable (sum of R^2) with every step rounded in that dtype; exact arithmetic gives "
              "min(S, T) for both.", "",
              "| S | " + " | ".join(f"{s} (T = {res['tasks'][s]['block_size']}): cond V | rank fp32 | rank bf16 | "
                                    "capacity fp32 | capacity bf16" for s in sets) + " |",
              "|---" * (1 + 5 * len(sets)) + "|"]
    for S, row in res["capacity"].items():
        lines.append(f"| {S} | " + " | ".join(f"{row[s]['cond']:.1e} | {row[s]['rank_fp32']} | {row[s]['rank_bf16']} | "
                                              f"{row[s]['fp32']:.2f} | {row[s]['bf16']:.2f}" for s in sets) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


STYLE = {"linear": ("C0", "o"), "softmax_state": ("C1", "s"), "selective": ("C2", "^"), "ema_kv": ("C3", "D"),
         "delta": ("C4", "v"), "linear_attn_history": ("C5", "P"), "swa": ("C7", "X"), "gpt": ("k", "*"),
         "softmax_history": ("C6", "*")}


def plot(res, path):
    """One panel per setting: accuracy at its largest pair count against state bytes (log x),
    one curve per family (the additive families one curve per width, C = 32 dashed)."""
    plt = runs.pyplot()
    sets = list(res["points"])
    fig, axes = plt.subplots(1, len(sets), figsize=(7 * len(sets), 5), squeeze=False)
    for ax, setting in zip(axes[0], sets):
        N = str(max(res["tasks"][setting]["pairs"]))
        curves = {}
        for name, p in res["points"][setting].items():
            width = p["knobs"].get("C") if p["family"] in ("linear", "softmax_state") else None
            curves.setdefault((p["family"], width), []).append(p)
        for (family, width), ps in sorted(curves.items(), key=lambda kv: (FAMILIES.index(kv[0][0]), kv[0][1] or 0)):
            ps = sorted(ps, key=lambda p: p["state_bytes"])
            color, marker = STYLE[family]
            ax.errorbar([p["state_bytes"] for p in ps], [p["acc"][N] for p in ps], [p["acc_std"][N] for p in ps],
                        color=color, marker=marker, ls="--" if width == 32 else "-", capsize=2, ms=6,
                        label=family + (f" C={width}" if width else ""))
        ax.axhline(1 / int(N), color="k", ls=":", lw=0.8, label="1/N (which values, not which key)")
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("recurrent state per layer at the test length (fp32 bytes)")
        ax.set_ylabel(f"MQAR accuracy per query at N = {N}")
        task = res["tasks"][setting]
        ax.set_title(f"{setting}: T = {task['block_size']}, N = {N} pairs, {task['n_keys']} keys")
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(cfg):
    """Train (or reuse) every point of the grid, then write frontier.json, .md and .png."""
    runs.make_out_dir(cfg.out_dir)  # one line before anything trains
    if cfg.quick:
        print(f"frontier --quick: {len(QUICK)} points, the near task, 1 seed, {budget_of(cfg, 'near')['steps']} "
              f"steps: it trades the grid, the press task and the seeds for minutes (the map: python frontier.py)",
              flush=True)
    t0, threads = time.time(), torch.get_num_threads()
    torch.set_num_threads(1)  # small models: one thread per run is fastest and leaves a core per worker
    try:
        results = run_grid(cfg)
    finally:
        torch.set_num_threads(threads)
    res = summarize(cfg, results, time.time() - t0)
    checkpoint.atomic_json(res, os.path.join(cfg.out_dir, "frontier.json"))
    write_md(res, os.path.join(cfg.out_dir, "frontier.md"))
    plot(res, os.path.join(cfg.out_dir, "frontier.png"))
    print(open(os.path.join(cfg.out_dir, "frontier.md")).read())
    return res


def get_parser():
    return cli.parser(FrontierConfig, "MQAR accuracy against recurrent state bytes per layer, for every kind of "
                                      "recurrent state (the map the paper promises).")


def parse(argv=None):
    """The FrontierConfig of a command line; --quick sets QUICK_BUDGET's values under the flags typed."""
    return cli.parse(FrontierConfig, get_parser(), argv, presets={"quick": QUICK_BUDGET})


if __name__ == "__main__":
    config = parse()
    cli.main_guard(lambda: main(config), prog="frontier.py")
