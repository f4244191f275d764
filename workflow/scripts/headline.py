"""results/summary.md, the study's headline (analysis.headline), one page: per pair the best SR setting's
speedup at equal score against Best-of-N, one table of every setting (the Best-of-N ladder included),
the tokens each setting saved next to the correlation study's oracle bound, and the notes, once
(analysis.summary_page.headline_page); results/tables/headline.md: everything the page leaves out,
per setting and per method (analysis.summary_page.details_page); results/metrics/headline.csv: the
same numbers, one row per pair and setting (the headline table joined with the token savings);
results/report_front.rst: the report's description (workflow/report/workflow.rst), Figure 3
(figure3, embedded) and the same headline page in RST (analysis.report_page), which the Snakefile
uses as the report's first page once it exists. The page is built once (analysis.summary_page)
and rendered to both.

results/metrics/adaptive.csv: each adaptive SR run against the fixed-α curve at equal compute
(analysis.adaptive_study.against_fixed_alpha, on the resamples of results/metrics/summary.csv).

Inputs: summary, bon_equivalent (results/metrics), runs (results/metrics/runs.csv), failed
(results/failed_prompts.csv: a method setting that completed no response gets a row saying so),
correlation (results/correlation/summary.csv), figure3 (results/figures/figure3.png), with
adaptive SR survival and fits (results/adaptive/<pair>/, possibly none), and for problems with
reference answers accuracy and accuracy_ladder (results/metrics/accuracy*.csv, possibly none). Params: pair_of (display
label of each adaptive file), improvement_normalization, bootstrap_resamples, confidence_level,
bootstrap_seed (config `tables`), correlation_resamples (config `correlation.n_resamples`, only
quoted in the notes), and compute where the rule gives it: the measure of the summary's relative_compute,
named in the pages' words (analysis.summary_format.COMPUTE_MEASURES; without it the summary's
compute_measure column, else "work"). Output `details` (results/tables/headline.md) where the rule names it, else
that path beside the summary."""

import os
import sys

import pandas as pd

from analysis.adaptive_study import ADAPTIVE, against_fixed_alpha
from analysis.headline import headline_table, token_savings
from analysis.metrics import bootstrap_draws
from analysis.modelled_compute import compute_note, load_calibration
from analysis.page import to_markdown
from analysis.report_page import FIGURE3_ALT, FIGURE3_CAPTION, embedded_figure_rst, front_page_rst
from analysis.summary_details import details_page
from analysis.summary_page import headline_page
from analysis.tables import unanswered_runs

sys.stderr = open(snakemake.log[0], "w", buffering=1)  # noqa: F821 (snakemake is injected)
params, inputs, out = snakemake.params, snakemake.input, snakemake.output  # noqa: F821


def read(path):
    try:
        return pd.read_csv(path, dtype={"prompt_id": str})
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


summary, bon_equivalent, runs = read(inputs.summary), read(inputs.bon_equivalent), read(inputs.runs)
correlation = read(inputs.correlation)


def per_pair(paths):
    frames = [read(path).assign(pair=params.pair_of[path]) for path in paths]
    return pd.concat(frames, ignore_index=True) if frames else None


survival, fits = per_pair(inputs.survival), per_pair(inputs.fits)
adaptive = pd.DataFrame()
if (summary["method"] == ADAPTIVE).any():
    draws = bootstrap_draws(runs, by=["pair_key", "pair", "generator", "reward"],
                            normalization=params.improvement_normalization,
                            n_resamples=params.bootstrap_resamples, seed=params.bootstrap_seed)
    adaptive = against_fixed_alpha(summary, draws, by=["pair"], confidence_level=params.confidence_level)
adaptive.to_csv(out.adaptive, index=False)
headline = headline_table(summary, bon_equivalent)
savings = token_savings(runs, correlation if not correlation.empty else None,
                        n_resamples=params.bootstrap_resamples, confidence_level=params.confidence_level,
                        seed=params.bootstrap_seed)
accuracy, accuracy_ladder = (read(paths[0]) if paths else None for paths in (inputs.accuracy, inputs.accuracy_ladder))
unanswered = unanswered_runs(read(inputs.failed))
# the detail page: what the summary leaves out (results/tables/, beside Tables 1 and 2)
details = out.get("details") or os.path.join(os.path.dirname(out.markdown), "tables", "headline.md")
page = headline_page(headline, savings, normalization=params.improvement_normalization,
                     correlation_resamples=params.correlation_resamples, adaptive=adaptive, survival=survival,
                     fits=fits, unanswered=unanswered, accuracy=accuracy, accuracy_ladder=accuracy_ladder,
                     summary=summary, compute=params.get("compute"),
                     compute_note=compute_note([load_calibration(path) for path in inputs.calibrations],
                                               read(inputs.compute_check)) if inputs.calibrations else None,
                     details=[os.path.relpath(path, os.path.dirname(out.markdown) or ".")
                              for path in (details, out.csv)])
with open(out.markdown, "w", encoding="utf-8") as markdown:
    markdown.write(to_markdown(page))
os.makedirs(os.path.dirname(details) or ".", exist_ok=True)
with open(details, "w", encoding="utf-8") as markdown:
    markdown.write(to_markdown(details_page(headline, savings, normalization=params.improvement_normalization,
                                            correlation_resamples=params.correlation_resamples,
                                            unanswered=unanswered, compute=params.get("compute"))))
with open(inputs.description, encoding="utf-8") as description, open(inputs.figure3, "rb") as figure3:
    front = front_page_rst(description.read(), page, embedded_figure_rst(figure3.read(), FIGURE3_ALT, FIGURE3_CAPTION))
with open(out.front, "w", encoding="utf-8") as page:
    page.write(front)
table = headline
if savings is not None and not savings.empty:
    tokens = savings.drop(columns=["confidence_level", "bootstrap_resamples"]).rename(
        columns={"n_prompts": "tokens_n_prompts"})
    table = headline.merge(tokens, on=["pair", "method", "setting", "method_label"], how="left")
table.to_csv(out.csv, index=False)
for row in headline[headline["best"]].itertuples():
    print(f"{row.pair}: best {row.method_label} ({row.selection})", file=sys.stderr)
