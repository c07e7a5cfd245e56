"""mkdocs hook: publish the committed benchmark charts (``benchmarks/results/*.png``) with the site, under
``results/``, so that docs/benchmarks.md shows the very files the benchmark runs wrote (no copies in docs/)."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def on_files(files: Files, config) -> Files:
    for chart in sorted(RESULTS.glob("*.png")):
        files.append(File(f"results/{chart.name}", src_dir=str(RESULTS.parent), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files
