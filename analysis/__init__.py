"""Analysis of specrej outputs: pure functions, pandas in → DataFrame / Figure out.

Modules (each documents the columns it consumes and produces):

- ``io``          — read trajectory JSONL and prefix parquet into plain Python / pandas.
- ``correlation`` — how well partial rewards predict final rewards (paper §4, Figures 2 and 4).
- ``metrics``     — improvement score, relative compute, speedup, BoN-equivalent compute,
                    perplexity (paper §5, Figure 3 and Table 2).
- ``figures``     — Figures 2–4 as matplotlib Figures, plus ``save_figure``.
- ``tables``      — Tables 1–2 as DataFrames, written as CSV, Markdown and LaTeX.
- ``winrate``     — win-rates vs Bo-N_min through alpaca_eval (API, local or offline judge) for Table 1.

Nothing here imports torch (only the torch-free ``specrej.selection``): the analysis runs on
any machine that has the JSONL / parquet files.
"""
