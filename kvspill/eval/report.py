"""The harness's outputs: `eval.json` (the whole document) and `eval.md` (the tables).

One document is one configuration (runner.run_eval). `combined_markdown` puts several side by
side (exact vs sparse, no RoPE scaling vs yarn) in one table: a row per configuration and task,
a column per length. Scores are percent (mean fraction of answers found), teacher-forced top-1
agreement is percent, KL is in nats per token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

JSON_NAME = "eval.json"
MARKDOWN_NAME = "eval.md"


def _lengths(docs: list[dict[str, Any]]) -> list[int]:
    return sorted(
        {row["length"] for doc in docs for row in doc["tasks"]}
        | {row["length"] for doc in docs for row in doc["teacher_forced"]}
    )


def _label(doc: dict[str, Any]) -> str:
    if doc.get("label"):
        return str(doc["label"])
    args = doc["engine_args"]
    return ", ".join(f"{k}={v}" for k, v in sorted(args.items())) or "defaults"


def _length_text(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def task_table(docs: list[dict[str, Any]]) -> str:
    lengths = _lengths(docs)
    head = ["configuration", "task", *(_length_text(n) for n in lengths)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for doc in docs:
        by_task: dict[str, dict[int, float]] = {}
        for row in doc["tasks"]:
            by_task.setdefault(row["task"], {})[row["length"]] = row["score"]
        for task, scores in by_task.items():
            cells = [f"{scores[n]:.1f}" if n in scores else "-" for n in lengths]
            lines.append("| " + " | ".join([_label(doc), task, *cells]) + " |")
    return "\n".join(lines)


def agreement_table(docs: list[dict[str, Any]]) -> str:
    head = ["configuration", "length", "tokens", "top-1 agreement %", "mean KL (nats)", "NLL", "NLL exact"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for doc in docs:
        for row in doc["teacher_forced"]:
            cells = [
                _label(doc),
                _length_text(row["length"]),
                str(row["num_tokens"]),
                f"{row['top1_agreement']:.2f}",
                f"{row['mean_kl']:.4f}",
                f"{row['nll_test']:.3f}",
                f"{row['nll_reference']:.3f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        if doc.get("teacher_forced_note"):
            lines.append(f"| {_label(doc)} | - | - | {doc['teacher_forced_note']} | | | |")
    return "\n".join(lines)


def shift_table(docs: list[dict[str, Any]]) -> str:
    """`shift_ppl` (context_shift.py): a line per configuration and mode."""
    lines = ["| configuration | context | mode | tokens | NLL | perplexity |", "|---|---|---|---|---|---|"]
    for doc in docs:
        for row in doc.get("context_shift", []):
            lines.append(
                f"| {_label(doc)} | {row['length']} | {row['mode']} | {row['num_tokens']} | {row['nll']:.4f} | "
                f"{row['perplexity']:.3f} |"
            )
    return "\n".join(lines)


def combined_markdown(docs: list[dict[str, Any]]) -> str:
    parts = [
        "## Synthetic tasks (score %, greedy)",
        "",
        task_table(docs),
        "",
        "## Teacher-forced agreement with exact attention (real text)",
        "",
        agreement_table(docs),
        "",
    ]
    if any(doc.get("context_shift") for doc in docs):
        parts += [
            "## Past the context: context shift against truncation (perplexity)",
            "",
            shift_table(docs),
            "",
        ]
    for doc in docs:
        parts.append(
            f"- {_label(doc)}: model {doc['model']}, engine args {json.dumps(doc['engine_args'], sort_keys=True)}, "
            f"reference {json.dumps(doc['reference_engine_args'], sort_keys=True)}, "
            f"{doc['spec']['num_samples']} samples per cell, seed {doc['spec']['seed']}, {doc['seconds']} s"
        )
    return "\n".join(parts) + "\n"


def write_report(doc: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write eval.json and eval.md into `out_dir` (created); returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / JSON_NAME, out_dir / MARKDOWN_NAME
    json_path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    md_path.write_text(combined_markdown([doc]))
    return json_path, md_path


def load_documents(paths: list[Path]) -> list[dict[str, Any]]:
    """Documents from eval.json files or the directories that hold them."""
    docs = []
    for path in paths:
        file = path / JSON_NAME if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(
                f"{file}: no {JSON_NAME} here (give a file or an --out directory of kvspill eval)"
            )
        docs.append(json.loads(file.read_text()))
    return docs
