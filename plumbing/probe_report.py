"""The files probe.py writes from its results dict (probe.summarize): results.md, the table of
role accuracies of the four readers (the SPCN trained by PGHU, the untrained SPCN, the causal GRU
and the BiGRU) beside the paper's numbers, and roles.png, the same per role. What the numbers
mean is in probe.py's docstring.

Paper: "EMA Is Not All You Need" (arXiv 2604.08556), section "Small scale: SPCN", its results
table. Glossary: within = Grammar A held out, transfer = trained on A, tested on B.

Run: nothing to run; `python probe.py` writes these (tests/test_probe.py checks them), and
results/probe/results.md is the committed one.
"""
import torch

from plumbing import tables


def write_markdown(res, path, who, contexts):
    """results.md: the summary table against the paper's numbers (res["paper"]), then per role.
    who: the four readers' labels in column order (probe.WHO); contexts: the rc_verb contexts and
    their descriptions (probe.RC_VERB_CONTEXTS)."""
    s, p = res["std"], res["paper"]
    cell = lambda g, k: f"{res[g][k]:.3f} ± {s[g][k]:.3f}"
    row = lambda label, g, keys, paper_spcn="-", paper_bigru="-": [label, *(cell(g, k) for k in keys), paper_spcn,
                                                                   paper_bigru]
    four = ("spcn", "untrained", "gru", "bigru")
    rv = res["roles"]["rc_verb"], s["roles"]["rc_verb"]
    pe = res["prediction_error"]
    lines = [
        f"# Role probes: SPCN (EMA traces), trained and untrained, vs supervised causal GRU and BiGRU "
        f"({res['seeds']} seed{'s' if res['seeds'] > 1 else ''}, {res['seconds']:.0f} s)", "",
        f"Command: `{res['command']}`", "",
        "SPCN columns: linear probes on activity + EMA traces, fit on A-train roles (the SPCN itself "
        "never sees a label). Taggers: trained on A-train roles. Mean ± std over seeds.", ""]
    rows = [
        row("within A", "within", ("traces", "untrained", "gru", "bigru"), f"{p['within_traces']:.3f}"),
        ["within A, instantaneous activity only", cell("within", "instantaneous"), "-", "-", "-",
         f"{p['within_instantaneous']:.3f}", "-"],
        ["within A, relative to the BiGRU", *(f"{res['within'][k] / res['within']['bigru']:.1%}"
                                              for k in ("traces", "untrained", "gru", "bigru")),
         f"{p['spcn_over_bigru']:.0%}", "-"],
        row("transfer A -> B, overall", "transfer", four, f"{p['transfer_spcn']:.3f}"),
        row("deep-embedded roles, transfer", "deep_embedded", four, f"{p['deep_embedded']:.2f}"),
        row("deep-embedded roles, within A", "deep_embedded_within", four),
        row("structural roles, transfer", "structural_transfer", four),
        row("content roles, transfer", "content_transfer", four, "-", "better than SPCN"),
        ["rc_verb, transfer", *(f"{rv[0]['transfer_' + w]:.3f} ± {rv[1]['transfer_' + w]:.3f}" for w in four),
         f"{p['rc_verb_transfer_spcn']:.3f}", f"{p['rc_verb_transfer_bigru']:.3f}"]]
    rows += [row(f"rc_verb, transfer, {desc}", "rc_verb_transfer_by_context", [f"{w}_after_{c}" for w in four])
             for c, desc in contexts.items()]
    rows += [["prediction error per unit, A-test / B-test",
              *(f"{pe[w]['within']:.4f} / {pe[w]['transfer']:.4f}" for w in ("spcn", "untrained")), "-", "-", "-", "-"],
             ["parameters", "-", "-", f"{res['params']['gru']:,}", f"{res['params']['bigru']:,}", "-", "-"]]
    lines += tables.md_table(["quantity", *who.values(), "paper SPCN", "paper BiGRU"], rows)
    lines += ["", "## Per role (mean over seeds)", ""]
    lines += tables.md_table(
        ["role", "kind", *(f"within {v}" for v in who.values()), *(f"transfer {v}" for v in who.values())],
        ([r, d["kind"], *(d[f"{sp}_{w}"] for sp in ("within", "transfer") for w in four)]
         for r, d in res["roles"].items()))
    tables.save_text("\n".join(lines) + "\n", path)


def plot_roles(res, path):
    """roles.png: accuracy per role of the four readers, within Grammar A and in transfer to B."""
    plt = tables.pyplot()

    roles = list(res["roles"])
    fig, axes = plt.subplots(2, 1, figsize=(13, 6.5), sharex=True)
    x = torch.arange(len(roles)).float()
    bars = (("spcn", "tab:blue", "SPCN, PGHU (activity + traces)"),
            ("untrained", "lightsteelblue", "SPCN, untrained (same traces, no PGHU)"),
            ("gru", "tab:green", "causal GRU (supervised, left context)"),
            ("bigru", "tab:orange", "BiGRU (supervised, both sides)"))
    for ax, split_name in zip(axes, ("within", "transfer")):
        for i, (who, color, label) in enumerate(bars):
            vals = [res["roles"][r][f"{split_name}_{who}"] for r in roles]
            ax.bar(x + 0.2 * (i - 1.5), vals, width=0.2, color=color, label=label)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"{split_name} accuracy")
        ax.set_title("within Grammar A (held-out)" if split_name == "within"
                     else "transfer: trained on A, tested on B", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, 0.95))
    axes[1].set_xticks(x.tolist())
    axes[1].set_xticklabels(roles, rotation=60, ha="right", fontsize=8)
    for lab, r in zip(axes[1].get_xticklabels(), roles):
        lab.set_color("tab:red" if res["roles"][r]["kind"] == "content" else "black")
    fig.suptitle("Role accuracy per role (red labels: content roles)")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    tables.save_figure(fig, path, dpi=110)
    plt.close(fig)
