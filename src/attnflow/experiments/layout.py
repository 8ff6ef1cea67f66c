"""The run folder of `run_experiment` (and `attnflow run --out DIR`), one name per file:

    DIR/config.toml        the full config, written first (rerun with it to resume)
    DIR/parts/<name>.zarr  finished units of work (one beta, one grid point), reused on a rerun
    DIR/result.zarr        the experiment's Dataset, written atomically at the end
    DIR/summary.json       headline numbers (`Experiment.summarize`), and summary.md as a table
    DIR/figures/           the experiment's figures (PNG and PDF), the token animation
    DIR/report.md          the report (and report.html): summary, figures with captions, config

Standard library only: the command line imports it without loading any experiment.
"""

from __future__ import annotations

CONFIG_FILE = "config.toml"
PARTS_DIR = "parts"
RESULT_STORE = "result.zarr"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
FIGURES_DIR = "figures"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
