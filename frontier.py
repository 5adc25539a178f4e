"""Mapping the boundary: how much associative recall each kind of recurrent state buys per byte.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556) promises a map of the boundary between
structure and content and draws one point: three fixed decays (192 numbers per layer at width
64) against readers that keep everything. This script draws the map on the field's axes
(Zoology, Arora et al. 2023; Based, Arora et al. 2024): MQAR accuracy per query against the bytes
of recurrent state one layer holds at the test length, log x-axis, one curve per family, every
point trained under recall.py's one recipe (recall.train_and_test) on recall.py's task. It asks
what buys recall: more decays (the additive EMA write at S = 3 .. 24), or a different write (the
same fixed decays writing key-value outer products, ema_kv; the delta rule, delta).

Families (named models of plumbing/registry.py, any of which --models takes; the models live in
spen.py, variants.py, writes.py and gpt.py; a state per head is read from the model: `headed`)
    linear, softmax_state   SPEN: the additive EMA state read by the paper's linear map or by
                            softmax over its S slots; S in --decays, at each of --widths   S C
    selective               SPEN linear with input-dependent decays (still an additive write)  S C
    ema_kv                  SPEN: the 3 paper decays writing k v^T per head, D in --head_widths  S C + S C D
    delta                   SPEN: the delta rule, learned write strength, D in --head_widths   S C + C D
    linear_attn_history     SPEN: bounded linear attention over every past trace slot     S C + C D + C
    swa                     GPT with sliding-window attention, w in --windows (w <= T)    2 (w - 1) C
    gpt, softmax_history    the unbounded references at the test length T            2 T C, S C + 2 T S C
Shape glossary: T tokens per sequence, N key-value pairs, C width, S decays (traces), D head width
(C / D heads), w attention window.
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
            1,000 steps (the curriculum 300 on N = 2, as in recall.py; the final decay 100); why
            this budget and this curriculum: results/frontier/README.md
Each point reports, per pair count N, the test accuracy per query and the binding score
(acc - 1/N) / (1 - 1/N), mean and spread over --seeds.

Run
    python frontier.py                                # the grid: every family, both settings, 2 seeds
    python frontier.py --quick                        # a handful of points (QUICK_POINTS) in minutes
    python frontier.py --out_dir results/frontier     # refresh the committed reference
    python frontier.py --out_dir results/frontier --report   # the table and figure of the runs saved so far
Two single-threaded runs train at a time (--workers). Every finished run is saved at once as
OUT/runs/SETTING/POINT_sSEED.json with its whole config beside its numbers (plumbing/grid.py: a
rerun with the same config reuses it, so a killed or interrupted grid continues where it stopped;
a run saved under other settings is never replaced: the command stops in one line, naming the
setting; one grid per folder). Then frontier.json, frontier.md and frontier.png; a report never
replaces one with more points. The reference grid, its figure, the argument beside it and the
time it took are in results/frontier/README.md.
"""

import dataclasses
import os
import time
from dataclasses import dataclass

from plumbing import cli  # first and cheap (no torch): a Ctrl-C from the first second is one line

cli.exit_on_ctrl_c(__name__, "frontier.py")  # until main_guard; the imports below take seconds

import torch

import ema
import recall
import spen
from plumbing import cli, grid, registry, tables

SETTINGS = {"near": dict(block_size=24, pairs=(2, 4, 8), n_keys=8, n_values=64),
            "press": dict(block_size=64, pairs=(2, 4, 8, 16), n_keys=16, n_values=64)}
BUDGETS = {"near": dict(steps=1500, curriculum=500, decay=150),  # recall.py's own: its runs are this grid's points
           "press": dict(steps=1000, curriculum=300, decay=100)}
# A family is a named model of plumbing/registry.py (its config overrides: recall.model_overrides), or swa (GPT
# with a sliding window, w in --windows); whether it holds a state per head is read from the model (headed).
FAMILIES = ("linear", "softmax_state", "selective", "ema_kv", "delta", "linear_attn_history", "softmax_history",
            "swa", "gpt")  # the map's families, in the tables' order
QUICK_POINTS = [("linear", dict(S=3, C=64)), ("softmax_state", dict(S=12, C=64)), ("ema_kv", dict(D=32)),
                ("delta", dict(D=32)), ("swa", dict(w=8)), ("gpt", {})]  # the grid of --quick
QUICK = dict(quick=True, settings=("near",), windows=(), seeds=1, steps=400, curriculum=150, decay=50)  # --quick


@dataclass
class FrontierConfig:
    out_dir: str = cli.arg("out/frontier", "folder for frontier.json/md/png and runs/ (one JSON per finished run)",
                           group="I/O")
    models: tuple = cli.arg(FAMILIES, "models (families of points) to train: swa or any name of plumbing/registry.py "
                            "(python ablate.py --help lists them)", group="grid", was=("families",))
    settings: tuple = cli.arg(tuple(SETTINGS), "tasks, any of " + " ".join(SETTINGS), group="grid")
    decays: tuple = cli.arg((3, 6, 12, 24), "S, numbers of decays of the additive families", group="grid",
                            bounds=(1, 1024))
    widths: tuple = cli.arg((32, 64), "C, widths of linear and softmax_state", group="grid", bounds=(2, 8192))
    width: int = cli.arg(64, "C of every other family", group="grid", bounds=(2, 8192))
    selective_decays: tuple = cli.arg((3, 12), "S of the selective family (at --width)", group="grid", bounds=(1, 1024))
    head_widths: tuple = cli.arg((1, 4, 16), "D, head widths of ema_kv, delta, linear_attn_history (D divides "
                                 "--width)", group="grid", bounds=(1, 8192))
    windows: tuple = cli.arg((4, 8, 16, 32, 64), "w, sliding windows of swa; each setting uses those <= its T",
                             group="grid", bounds=(1, 2 ** 16))
    seeds: int = cli.arg(2, "seeds per point (model init and training data)", group="grid", bounds=(1, 100))
    steps: int = cli.arg(None, "optimizer steps per run; None: the setting's budget (BUDGETS)", group="recipe",
                         bounds=(1, 10 ** 8))
    curriculum: int = cli.arg(None, "first steps on the smallest pair count; None: the setting's", group="recipe",
                              bounds=(0, 10 ** 8))
    decay: int = cli.arg(None, "final steps of linear lr decay; None: the setting's", group="recipe",
                         bounds=(0, 10 ** 8))
    quick: bool = cli.arg(False, "a handful of points: " + ", ".join(f for f, _ in QUICK_POINTS) + "; the near task, "
                          "1 seed, 400 steps (minutes, not hours)", group="grid")
    report: bool = cli.arg(False, "train nothing: the table and figure of the runs saved so far (a grid still "
                           "running, or a killed one)", group="grid")
    workers: int = cli.arg(2, "runs trained at a time, one thread each", group="system", bounds=cli.WORKERS)

    def __post_init__(self):
        cli.check_fields(self)  # each number's type and bounds (the field's), no list entry twice: one line
        for name in ("models", "settings", "decays", "widths", "selective_decays", "head_widths", "windows"):
            setattr(self, name, tuple(getattr(self, name)))
        cli.require_names("models", self.models, names())
        for name in self.models:  # a hybrid names its own blocks; the map trains at recall's depth
            depth, layers = len(registry.MODELS[name].blocks()) if name != "swa" else 1, recall.RecallConfig.n_layer
            cli.require(depth in (1, layers), "--models {} has {} blocks; the map's models have {}: drop it from "
                        "--models (recall.py --models {} --n_layer {} trains it)", name, depth, layers, name, depth)
        cli.require_names("settings", self.settings, SETTINGS)
        bad = [D for D in self.head_widths if self.width % D]
        cli.require(not bad, "--head_widths {} do not divide --width {}: a head width D needs width / D heads",
                    " ".join(map(str, bad)), self.width)
        cli.require(all(C % 2 == 0 for C in self.widths) and self.width % 2 == 0,
                    "--widths and --width must be even (softmax_state, swa and gpt use 2 heads)")
        longest = max(SETTINGS[s]["block_size"] for s in self.settings)
        too_long = [w for w in self.windows if w > longest]
        cli.require(not too_long, "--windows {} is longer than every sequence (T <= {}): a window of T is full "
                    "attention (the gpt point)", " ".join(map(str, too_long)), longest)
        for setting in self.settings:
            b = budget_of(self, setting)
            cli.require(b["steps"] >= 1, "--steps must be >= 1, got {}", b["steps"])
            cli.require(0 <= b["curriculum"] <= b["steps"] and 0 <= b["decay"] <= b["steps"],
                        "--curriculum and --decay must be in [0, --steps], got {} and {}", b["curriculum"], b["decay"])


def names():
    """Every model the map can train, each a family of points: the registry's named models (read when
    asked: one registered after this import is one too) and swa."""
    return tuple(registry.MODELS) + ("swa",)


def overrides(family):
    """(kind, config overrides) of a family: its registry entry (recall.model_overrides), or GPT for swa."""
    return recall.model_overrides(family) if family != "swa" else ("gpt", {})


def headed(family):
    """Does the family hold a state per head, so that a head width D is a knob? Read from the model:
    its state at recall's test length changes with the number of heads (a registry entry that fixes
    n_head has no such knob)."""
    kind, over = overrides(family)
    if kind != "spen" or "n_head" in over:
        return False
    with torch.device("meta"):  # shapes only
        sizes = {recall.build_model(recall.RecallConfig(n_head=h), kind, over).state_floats(24) for h in (1, 2)}
    return len(sizes) > 1


def rank(family):
    """A family's place in the tables and the figure: FAMILIES' order, any other after them."""
    return FAMILIES.index(family) if family in FAMILIES else len(FAMILIES)


def budget_of(cfg, setting):
    """steps, curriculum and decay of one setting: its BUDGETS entry under the flags given."""
    return {k: getattr(cfg, k) if getattr(cfg, k) is not None else v for k, v in BUDGETS[setting].items()}


def points(cfg, setting):
    """[(family, knobs)] of the grid for one setting, knobs a dict of S, C, D, w as they apply."""
    if cfg.quick:
        return [(f, k) for f, k in QUICK_POINTS if f in cfg.models]
    T, out = SETTINGS[setting]["block_size"], []
    for family in cfg.models:
        if family in ("linear", "softmax_state"):
            out += [(family, dict(S=S, C=C)) for C in cfg.widths for S in cfg.decays]
        elif family == "selective":
            out += [(family, dict(S=S, C=cfg.width)) for S in cfg.selective_decays]
        elif headed(family):
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
    """The point's model (recall.build_model on the point's task: 2 layers, 2 heads unless a head
    width D sets C / D of them, vocabulary K + M + 1)."""
    rcfg = recall_config(cfg, setting, knobs)
    kind, over = overrides(family)
    if kind == "gpt":
        return recall.build_model(rcfg, "gpt", dict(over, window=knobs.get("w")))
    return recall.build_model(rcfg, "spen", dict(dict(n_head=rcfg.n_embd // knobs.get("D", rcfg.n_embd // 2),
                                                      alphas=ema.spread_decays(knobs.get("S", 3))), **over))


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


SAVED = dict(setting=str, point=str, seed=int, test={"acc": tables.Each(tables.NUMBER)}, state_bytes=tables.NUMBER,
             params=int, seconds=tables.NUMBER)  # what summarize reads, and its shape (grid.Grid checks it)


def run_key(cfg, setting, family, knobs):
    """Everything a run's numbers depend on: a saved run is reused only under the same key."""
    return dict(recall=recall.run_settings(recall_config(cfg, setting, knobs)), family=family, knobs=knobs,
                model=dataclasses.asdict(build_model(cfg, setting, family, knobs).config))


NEWER = {f"model.{f.name}": f.default for f in dataclasses.fields(spen.SPENConfig)}  # a model field a saved run
# lacks is newer than the run: it ran as the field's default does (grid.Grid's `absent`)


def jobs(cfg):
    """Every (setting, point, seed) of the grid as a grid.Job, seed-major so a partial grid has
    whole seeds."""
    return [grid.Job(f"{setting}/{label(family, knobs)}_s{seed}", run_key(cfg, setting, family, knobs),
                     (cfg, setting, family, knobs, seed))
            for seed in range(cfg.seeds) for setting in cfg.settings for family, knobs in points(cfg, setting)]


def progress(r, done, todo, seconds):
    """The line printed as each run finishes."""
    if r.get("diverged") is not None:
        return (f"[{done}/{todo}] {r['setting']:5s} {r['point']:<26s} seed {r['seed']} DIVERGED at step "
                f"{r['diverged']} (loss not finite); not tabled")
    accs = " ".join(f"{N}:{a:.2f}" for N, a in r["test"]["acc"].items())
    return (f"[{done}/{todo}] {r['setting']:5s} {r['point']:<26s} seed {r['seed']} acc {accs} | "
            f"{r['state_bytes']:,} B | {r['seconds']:.0f} s | ETA {seconds / done * (todo - done) / 60:.0f} min")


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
    """frontier.json after its command and settings (tables.save_json): per setting and point, mean
    and std over seeds of accuracy and binding at every pair count, the state bytes, the family
    and knobs."""
    out = dict(tasks=SETTINGS,
               budgets={s: budget_of(cfg, s) for s in cfg.settings}, capacity=capacity_table(cfg),
               seconds=round(seconds, 1), run_seconds=round(sum(r["seconds"] for r in results), 1), points={},
               diverged=tables.diverged_runs([dict(r, point=f"{r['setting']} {r['point']}") for r in results]))
    results = [r for r in results if r.get("diverged") is None]  # in no mean: listed under "diverged"
    for setting in cfg.settings:
        out["points"][setting] = {}
        for family, knobs in points(cfg, setting):
            name = label(family, knobs)
            rs = sorted((r for r in results if r["setting"] == setting and r["point"] == name), key=lambda r: r["seed"])
            if not rs:
                continue
            acc = {N: tables.mean_std([r["test"]["acc"][N] for r in rs]) for N in rs[0]["test"]["acc"]}
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
    for family in sorted({p["family"] for p in pts.values()}, key=rank):
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
                  f"{b['steps']} steps (curriculum {b['curriculum']}, final decay {b['decay']})", ""]
        lines += tables.md_table(
            ["point", "family", "state bytes / layer", "seeds"] + [f"acc N={N}" for N in pairs]
            + [f"binding N={N}" for N in pairs],
            ([name, p["family"], f"{p['state_bytes']:,}", p["seeds"]]
             + [f"{p['acc'][str(N)]:.3f} ± {p['acc_std'][str(N)]:.3f}" for N in pairs]
             + [f"{p['binding'][str(N)]:+.3f}" for N in pairs]
             for name, p in sorted(pts.items(), key=lambda kv: (rank(kv[1]["family"]),
                                                                kv[1]["state_bytes"]))))
        N = str(pairs[-1])
        lines += ["", f"Per family at N = {N}: the best point, and the fewest bytes that answer >= {RECALLS} "
                  "(the curve's knee; '-' = none in the grid).", ""]
        lines += tables.md_table(
            ["family", "best accuracy (at bytes)", f"fewest bytes with accuracy >= {RECALLS}"],
            ([family, f"{best['acc'][N]:.3f} ({best['state_bytes']:,})",
              f"{knee['state_bytes']:,} ({knee['acc'][N]:.3f})" if knee else "-"]
             for family, best, knee in family_summary(pts, N)))
        lines.append("")
    lines += capacity_lines(res["capacity"], {s: res["tasks"][s]["block_size"] for s in res["points"]})
    lines += tables.diverged_lines(res)
    tables.save_text("\n".join(lines) + "\n", path)


COND_SHOWN = 1e13  # cond V is printed below this, and above it only as this lower bound (cond_text)


def cond_text(cond):
    """cond V as float64 resolves it. A computed singular value is off by up to u sigma_1 (u = 2^-53, the
    LAPACK Users' Guide's error bound), so a computed cond is off by up to a relative u cond: below 1e13
    that is under 0.1%, and the two digits printed are the matrix's, on any CPU; above, the smallest
    singular value is rounding noise whose digits the CPU's BLAS kernel decides, and only the bound is true."""
    return f"{cond:.1e}" if cond < COND_SHOWN else f"> {COND_SHOWN:.0e}"


def capacity_lines(capacity, T):
    """The report's section on the argument's steps 1 and 2 (capacity_table's rows; T: {setting: its T})."""
    lines = ["## What S fixed decays can hold (ema.trace_map, ema.memory_capacity)", "",
             "One channel's state of S decays (ema.spread_decays) after T inputs is V x with V the S x T trace "
             f"map: its condition number (float64: to within 0.1% below {COND_SHOWN:.0e}, above it only a lower "
             "bound), its numerical rank (singular values above the dtype's unit roundoff times the largest), and "
             "the linear memory capacity, in past inputs recoverable (sum of R^2) with every step rounded in that "
             "dtype; exact arithmetic gives min(S, T) for both.", ""]
    return lines + tables.md_table(
        ["S"] + [col for s in T for col in (f"{s} (T = {T[s]}): cond V", "rank fp32", "rank bf16", "capacity fp32",
                                            "capacity bf16")],
        ([S] + [cell for s in T for cell in (cond_text(row[s]["cond"]), row[s]["rank_fp32"], row[s]["rank_bf16"],
                                             f"{row[s]['fp32']:.2f}", f"{row[s]['bf16']:.2f}")]
         for S, row in capacity.items()))


MARKERS = "os^DvP*X*p<>h"  # a family's marker by its place (rank); colours from matplotlib's cycle


def plot(res, path):
    """One panel per setting: accuracy at its largest pair count against state bytes (log x),
    one curve per family (the additive families one curve per width, C = 32 dashed)."""
    plt = tables.pyplot()
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    sets = list(res["points"])
    fig, axes = plt.subplots(1, len(sets), figsize=(7 * len(sets), 5), squeeze=False)
    for ax, setting in zip(axes[0], sets):
        N = str(max(res["tasks"][setting]["pairs"]))
        curves = {}
        for name, p in res["points"][setting].items():
            width = p["knobs"].get("C") if p["family"] in ("linear", "softmax_state") else None
            curves.setdefault((p["family"], width), []).append(p)
        order = sorted({f for f, _ in curves}, key=lambda f: (rank(f), f))  # a family's place: its colour, marker
        for (family, width), ps in sorted(curves.items(), key=lambda kv: (rank(kv[0][0]), kv[0][0], kv[0][1] or 0)):
            ps = sorted(ps, key=lambda p: p["state_bytes"])
            i = rank(family) if family in FAMILIES else len(FAMILIES) + order.index(family)
            color, marker = cycle[i % len(cycle)], MARKERS[i % len(MARKERS)]
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
    tables.save_figure(fig, path)
    plt.close(fig)


def count_points(res):
    """The points a frontier.json holds, over its settings."""
    return sum(len(pts) for pts in res["points"].values())


def main(cfg):
    """Train (or reuse) every point of the grid, then write frontier.json, .md and .png;
    --report trains nothing and reports the runs saved so far."""
    if cfg.quick:
        print(f"frontier --quick: {len(QUICK_POINTS)} points, the near task, 1 seed, {budget_of(cfg, 'near')['steps']} "
              f"steps: it trades the grid, the press task and the seeds for minutes (the map: python frontier.py)",
              flush=True)
    t0, out = time.time(), lambda name: os.path.join(cfg.out_dir, name)
    with grid.Grid(cfg.out_dir, jobs(cfg), cli.command_line("frontier.py", cfg), vars(cfg), SAVED,
                   lock=not cfg.report, absent=NEWER) as cache:
        if cfg.report and not cache.saved:
            raise grid.GridError(f"--report: no saved run of this grid in {cache.folder} (a typo in --out_dir?); "
                                 f"train them with the same command without --report")
        names = {j.name.rsplit("_s", 1)[0] for j in cache.jobs if j.name in cache.saved or not cfg.report}
        grid.refuse_emptier(out("frontier.json"), count_points, len(names), "points")
        print(f"frontier: {len(cache.jobs)} runs, {len(cache.saved)} already saved, "
              f"{len(cache.jobs) - len(cache.saved)} to train ({cfg.workers} at a time)"
              + (": --report trains none of them" if cfg.report else ""), flush=True)
        results = list(cache.saved.values()) if cfg.report else cache.run(run_point, cfg.workers, progress)
        res = tables.save_json(summarize(cfg, results, time.time() - t0), out("frontier.json"), "frontier.py", cfg)
        write_md(res, out("frontier.md"))
        plot(res, out("frontier.png"))
    with open(out("frontier.md")) as f:
        print(f.read())
    return res


def get_parser():
    return cli.parser(FrontierConfig, "MQAR accuracy against recurrent state bytes per layer, for every kind of "
                                      "recurrent state (the map the paper promises).")


def parse(argv=None):
    """The FrontierConfig of a command line; --quick sets QUICK's values under the flags typed."""
    return cli.parse(FrontierConfig, get_parser(), argv, presets={"quick": QUICK})


if __name__ == "__main__":
    config = parse()
    cli.main_guard(lambda: main(config), prog="frontier.py")
